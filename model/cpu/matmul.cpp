// Matrix-vector kernels for every weight format (Highway, one instantiation per target).
//
// Decode multiplies a few activation rows by a large weight matrix: every weight byte is read
// once, so the kernels are built to stream weights at memory speed. Quantized rows are decoded
// 32 elements at a time into a 32-byte staging buffer in L1 (a block always starts on a word
// boundary, formats.md §2.4), widened to f32 in registers, turned into scale*q + bias with one
// FMA and multiplied into up to 4 token accumulators, so no dequantized copy of the matrix ever
// exists. F16/BF16 are widened in registers.

#include <algorithm>
#include <bit>
#include <cstring>

#include "model/cpu/kernels.hpp"
#include "model/cpu/weight_decode.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu/matmul.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>
#include "model/cpu/decode-inl.hpp"
// clang-format on

static_assert(std::endian::native == std::endian::little,
              "the quantized-weight decoders assume a little-endian host");

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 f32 lanes, so that one or two vectors tile a 32-element quantized block exactly on
// every target (SVE may be wider than 512 bits).
using DF = hn::CappedTag<float, 16>;

// Codes [j, j + Lanes) of a staged block as f32.
HWY_INLINE hn::Vec<DF> codes_to_f32(const std::uint8_t* codes) {
    const DF df;
    const hn::Rebind<std::int32_t, DF> di;
    const hn::Rebind<std::uint8_t, DF> d8;
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, codes)));
}

// Lanes of a plain-dtype row starting at element `c`, widened to f32.
template <DType DT>
HWY_INLINE hn::Vec<DF> load_weights(const std::uint8_t* row, std::int64_t c) {
    const DF df;
    if constexpr (DT == DType::kF32) {
        return hn::LoadU(df, reinterpret_cast<const float*>(row + c * 4));
    } else if constexpr (DT == DType::kBF16) {
        const hn::Rebind<hwy::bfloat16_t, DF> dbf;
        return hn::PromoteTo(df,
                             hn::LoadU(dbf, reinterpret_cast<const hwy::bfloat16_t*>(row + c * 2)));
    } else {
        const hn::Rebind<hwy::float16_t, DF> dh;
        return hn::PromoteTo(df,
                             hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row + c * 2)));
    }
}

// Accumulators of T tokens (T <= 4), two per token for instruction-level parallelism.
// Named variables rather than an array: SVE vectors are sizeless and cannot live in arrays.
template <int T>
struct Accumulators {
    hn::Vec<DF> a0, b0, a1, b1, a2, b2, a3, b3;
    Accumulators() {
        const DF df;
        a0 = b0 = a1 = b1 = a2 = b2 = a3 = b3 = hn::Zero(df);
    }
    // acc += w0 * x[c..] and w1 * x[c + N..] for every token.
    HWY_INLINE void step(hn::Vec<DF> w0, hn::Vec<DF> w1, const float* x, std::int64_t ldx,
                         std::int64_t c, std::int64_t n_lanes) {
        const DF df;
        a0 = hn::MulAdd(w0, hn::LoadU(df, x + c), a0);
        b0 = hn::MulAdd(w1, hn::LoadU(df, x + c + n_lanes), b0);
        if constexpr (T > 1) {
            a1 = hn::MulAdd(w0, hn::LoadU(df, x + ldx + c), a1);
            b1 = hn::MulAdd(w1, hn::LoadU(df, x + ldx + c + n_lanes), b1);
        }
        if constexpr (T > 2) {
            a2 = hn::MulAdd(w0, hn::LoadU(df, x + 2 * ldx + c), a2);
            b2 = hn::MulAdd(w1, hn::LoadU(df, x + 2 * ldx + c + n_lanes), b2);
        }
        if constexpr (T > 3) {
            a3 = hn::MulAdd(w0, hn::LoadU(df, x + 3 * ldx + c), a3);
            b3 = hn::MulAdd(w1, hn::LoadU(df, x + 3 * ldx + c + n_lanes), b3);
        }
    }
    HWY_INLINE void step1(hn::Vec<DF> w0, const float* x, std::int64_t ldx, std::int64_t c) {
        const DF df;
        a0 = hn::MulAdd(w0, hn::LoadU(df, x + c), a0);
        if constexpr (T > 1) a1 = hn::MulAdd(w0, hn::LoadU(df, x + ldx + c), a1);
        if constexpr (T > 2) a2 = hn::MulAdd(w0, hn::LoadU(df, x + 2 * ldx + c), a2);
        if constexpr (T > 3) a3 = hn::MulAdd(w0, hn::LoadU(df, x + 3 * ldx + c), a3);
    }
    HWY_INLINE void reduce(float* out) const {
        const DF df;
        out[0] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, b0)));
        if constexpr (T > 1) out[1] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a1, b1)));
        if constexpr (T > 2) out[2] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a2, b2)));
        if constexpr (T > 3) out[3] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a3, b3)));
    }
};

// out[t] = dot(x[t], row) for T tokens of a plain-dtype row.
template <DType DT, int T>
HWY_INLINE void dot_plain(const std::uint8_t* row, std::int64_t cols, const float* x,
                          std::int64_t ldx, float* out, std::int64_t prefetch_bytes = 0) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    constexpr std::int64_t kElemBytes = DT == DType::kF32 ? 4 : 2;
    Accumulators<T> acc;
    std::int64_t c = 0;
    for (; c + 2 * n <= cols; c += 2 * n) {
        if (prefetch_bytes > 0) hwy::Prefetch(row + c * kElemBytes + prefetch_bytes);
        acc.step(load_weights<DT>(row, c), load_weights<DT>(row, c + n), x, ldx, c, n);
    }
    for (; c + n <= cols; c += n) acc.step1(load_weights<DT>(row, c), x, ldx, c);
    acc.reduce(out);
    for (; c < cols; ++c) {
        const float w = load_any(DT, row, c);
        for (int t = 0; t < T; ++t) out[t] += w * x[t * ldx + c];
    }
}

// out[t] = dot(x[t], dequantized row r) for T tokens, decoding in registers.
template <int T>
HWY_INLINE void dot_quant(const WeightMatrix& w, std::int64_t r, const float* x, std::int64_t ldx,
                          float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const int bits = w.bits;
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = w.cols / group;
    const auto* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes();
    HWY_ALIGN std::uint8_t staged[32];
    Accumulators<T> acc;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        const auto scale = hn::Set(df, load_any(w.scale_dtype, w.scales, r * n_groups + g));
        const auto bias = hn::Set(df, load_any(w.scale_dtype, w.biases, r * n_groups + g));
        for (std::int64_t c0 = g * group; c0 < (g + 1) * group; c0 += 32) {
            const std::uint8_t* codes = stage_block(row + c0 * bits / 8, bits, staged);
            for (std::int64_t j = 0; j < 32; j += 2 * n) {
                const auto w0 = hn::MulAdd(codes_to_f32(codes + j), scale, bias);
                const auto w1 = hn::MulAdd(codes_to_f32(codes + j + n), scale, bias);
                acc.step(w0, w1, x, ldx, c0 + j, n);
            }
        }
    }
    acc.reduce(out);
}

template <DType DT>
HWY_INLINE void dequantize_plain_row(const std::uint8_t* row, std::int64_t cols, float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    std::int64_t c = 0;
    for (; c + n <= cols; c += n) hn::StoreU(load_weights<DT>(row, c), df, out + c);
    for (; c < cols; ++c) out[c] = load_any(DT, row, c);
}

HWY_INLINE void dequantize_one_row(const WeightMatrix& w, std::int64_t r, float* out) {
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    if (!w.quantized()) {
        const auto* row = base + r * w.row_bytes();
        switch (w.dtype) {
            case DType::kF32:
                dequantize_plain_row<DType::kF32>(row, w.cols, out);
                return;
            case DType::kBF16:
                dequantize_plain_row<DType::kBF16>(row, w.cols, out);
                return;
            default:
                dequantize_plain_row<DType::kF16>(row, w.cols, out);
                return;
        }
    }
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const int bits = w.bits;
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = w.cols / group;
    const auto* row = base + r * w.row_bytes();
    HWY_ALIGN std::uint8_t staged[32];
    for (std::int64_t g = 0; g < n_groups; ++g) {
        const auto scale = hn::Set(df, load_any(w.scale_dtype, w.scales, r * n_groups + g));
        const auto bias = hn::Set(df, load_any(w.scale_dtype, w.biases, r * n_groups + g));
        for (std::int64_t c0 = g * group; c0 < (g + 1) * group; c0 += 32) {
            const std::uint8_t* codes = stage_block(row + c0 * bits / 8, bits, staged);
            for (std::int64_t j = 0; j < 32; j += n) {
                hn::StoreU(hn::MulAdd(codes_to_f32(codes + j), scale, bias), df, out + c0 + j);
            }
        }
    }
}

template <int T>
HWY_INLINE void dot_row(const WeightMatrix& w, std::int64_t r, const float* x, float* out,
                        std::int64_t prefetch) {
    const std::int64_t cols = w.cols;
    if (w.quantized()) return dot_quant<T>(w, r, x, cols, out);
    const auto* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes();
    switch (w.dtype) {
        case DType::kF32:
            return dot_plain<DType::kF32, T>(row, cols, x, cols, out, prefetch);
        case DType::kBF16:
            return dot_plain<DType::kBF16, T>(row, cols, x, cols, out, prefetch);
        default:
            return dot_plain<DType::kF16, T>(row, cols, x, cols, out, prefetch);
    }
}

// Dots of all n tokens with one row in tiles of 4 (then 3, 2, 1) tokens.
HWY_INLINE void dot_row_all_tokens(const WeightMatrix& w, std::int64_t r, const float* x,
                                   std::int64_t n, float bias, float* y, std::int64_t ldy,
                                   std::int64_t prefetch = 0) {
    float out[4];
    std::int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        dot_row<4>(w, r, x + t * w.cols, out, prefetch);
        for (int i = 0; i < 4; ++i) y[(t + i) * ldy + r] = out[i] + bias;
    }
    const std::int64_t left = n - t;
    if (left == 3) dot_row<3>(w, r, x + t * w.cols, out, prefetch);
    if (left == 2) dot_row<2>(w, r, x + t * w.cols, out, prefetch);
    if (left == 1) dot_row<1>(w, r, x + t * w.cols, out, prefetch);
    for (std::int64_t i = 0; i < left; ++i) y[(t + i) * ldy + r] = out[i] + bias;
}

// Rows per register tile of batched decode: 4 rows x 4 tokens = 16 accumulators where there
// are 32 vector registers (AVX-512, AArch64), else 2 x 4. Each x load then feeds R FMAs and
// each weight load 4, so the activations of 5-31 tokens (beyond L1) are read R times less.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM_A64
constexpr int kTileRows = 4;
#else
constexpr int kTileRows = 2;
#endif

// out[r * 4 + t] = dot(rows[r], x[t]) for R f32 rows and T <= 4 tokens.
template <int R, int T>
HWY_INLINE void dot_f32_tile(const float* const* rows, std::int64_t cols, const float* x,
                             std::int64_t ldx, float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    hn::Vec<DF> acc[R][T];
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(df);
    }
    std::int64_t c = 0;
    for (; c + n <= cols; c += n) {
        hn::Vec<DF> w[R];
        for (int r = 0; r < R; ++r) w[r] = hn::LoadU(df, rows[r] + c);
        for (int t = 0; t < T; ++t) {
            const auto xt = hn::LoadU(df, x + t * ldx + c);
            for (int r = 0; r < R; ++r) acc[r][t] = hn::MulAdd(w[r], xt, acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) {
            float v = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
            for (std::int64_t k = c; k < cols; ++k) {
                float wk;  // f32 rows used in place may be unaligned
                std::memcpy(&wk, rows[r] + k, sizeof wk);
                v += wk * x[t * ldx + k];
            }
            out[r * 4 + t] = v;
        }
    }
}

// Batched decode (n > 4): rows in tiles of R, each row widened or dequantized to f32 into
// row_scratch (R * cols floats) once for all tokens (f32 rows are used in place), then
// multiplied into tiles of 4 (then 3, 2, 1) tokens. Returns the first row not done.
template <int R>
HWY_INLINE std::int64_t gemv_row_tiles(const WeightMatrix& w, const float* x, std::int64_t n,
                                       std::int64_t r, std::int64_t row_end,
                                       const WeightVector* bias, float* y, std::int64_t ldy,
                                       float* row_scratch) {
    const bool has_bias = bias != nullptr && bias->valid();
    const bool in_place = !w.quantized() && w.dtype == DType::kF32;
    const std::int64_t cols = w.cols;
    for (; r + R <= row_end; r += R) {
        const float* rows[R];
        float b[R];
        for (int i = 0; i < R; ++i) {
            b[i] = has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f;
            if (in_place) {
                rows[i] = reinterpret_cast<const float*>(static_cast<const std::uint8_t*>(w.data) +
                                                         (r + i) * w.row_bytes());
            } else {
                dequantize_one_row(w, r + i, row_scratch + i * cols);
                rows[i] = row_scratch + i * cols;
            }
        }
        float out[R * 4];
        std::int64_t t = 0;
        auto store = [&](std::int64_t t0, std::int64_t count) {
            for (int i = 0; i < R; ++i) {
                for (std::int64_t k = 0; k < count; ++k) {
                    y[(t0 + k) * ldy + r + i] = out[i * 4 + k] + b[i];
                }
            }
        };
        for (; t + 4 <= n; t += 4) {
            dot_f32_tile<R, 4>(rows, cols, x + t * cols, cols, out);
            store(t, 4);
        }
        const std::int64_t left = n - t;
        if (left == 3) dot_f32_tile<R, 3>(rows, cols, x + t * cols, cols, out);
        if (left == 2) dot_f32_tile<R, 2>(rows, cols, x + t * cols, cols, out);
        if (left == 1) dot_f32_tile<R, 1>(rows, cols, x + t * cols, cols, out);
        store(t, left);
    }
    return r;
}

void GemvRows(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t row_begin,
              std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy,
              float* row_scratch, std::int64_t prefetch_bytes) {
    if (n > 4 && row_scratch != nullptr) {
        // Tiles of rows; the last few rows fall through to the single-row loop below.
        row_begin =
            gemv_row_tiles<kTileRows>(w, x, n, row_begin, row_end, bias, y, ldy, row_scratch);
    }
    const bool has_bias = bias != nullptr && bias->valid();
    // With more than 4 tokens a quantized row would be decoded once per tile of 4; decode it
    // once into L1 instead and run the f32 kernel over it.
    const bool decode_first = w.quantized() && n > 4;
    WeightMatrix f32_row{DType::kF32, 1, w.cols, row_scratch};
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float b = has_bias ? load_any(bias->dtype, bias->data, r) : 0.0f;
        if (decode_first) {
            dequantize_one_row(w, r, row_scratch);
            dot_row_all_tokens(f32_row, 0, x, n, b, y + r, ldy);
        } else {
            dot_row_all_tokens(w, r, x, n, b, y, ldy, prefetch_bytes);
        }
    }
}

void DequantizeRows(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                    float* out) {
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        dequantize_one_row(w, r, out + (r - row_begin) * w.cols);
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model::cpu {

HWY_EXPORT(GemvRows);
HWY_EXPORT(DequantizeRows);

void gemv_rows(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t row_begin,
               std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy,
               float* row_scratch, std::int64_t prefetch_bytes) {
    HWY_DYNAMIC_DISPATCH(GemvRows)
    (w, x, n, row_begin, row_end, bias, y, ldy, row_scratch, prefetch_bytes);
}

void dequantize_rows(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                     float* out) {
    HWY_DYNAMIC_DISPATCH(DequantizeRows)(w, row_begin, row_end, out);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
