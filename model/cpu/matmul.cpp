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

// Accumulators of T tokens (T <= 4) for two rows at once: each x load feeds two FMAs, which
// halves the activation traffic of batched decode (the x of 5-16 tokens no longer fits L1).
template <int T>
struct PairAccumulators {
    hn::Vec<DF> a0, a1, a2, a3, c0, c1, c2, c3;  // a: first row, c: second row
    PairAccumulators() {
        const DF df;
        a0 = a1 = a2 = a3 = c0 = c1 = c2 = c3 = hn::Zero(df);
    }
    HWY_INLINE void step(hn::Vec<DF> w0, hn::Vec<DF> w1, const float* x, std::int64_t ldx,
                         std::int64_t c) {
        const DF df;
        const auto x0 = hn::LoadU(df, x + c);
        a0 = hn::MulAdd(w0, x0, a0);
        c0 = hn::MulAdd(w1, x0, c0);
        if constexpr (T > 1) {
            const auto x1 = hn::LoadU(df, x + ldx + c);
            a1 = hn::MulAdd(w0, x1, a1);
            c1 = hn::MulAdd(w1, x1, c1);
        }
        if constexpr (T > 2) {
            const auto x2 = hn::LoadU(df, x + 2 * ldx + c);
            a2 = hn::MulAdd(w0, x2, a2);
            c2 = hn::MulAdd(w1, x2, c2);
        }
        if constexpr (T > 3) {
            const auto x3 = hn::LoadU(df, x + 3 * ldx + c);
            a3 = hn::MulAdd(w0, x3, a3);
            c3 = hn::MulAdd(w1, x3, c3);
        }
    }
    HWY_INLINE void reduce(float* out0, float* out1) const {
        const DF df;
        out0[0] = hn::GetLane(hn::SumOfLanes(df, a0));
        out1[0] = hn::GetLane(hn::SumOfLanes(df, c0));
        if constexpr (T > 1) {
            out0[1] = hn::GetLane(hn::SumOfLanes(df, a1));
            out1[1] = hn::GetLane(hn::SumOfLanes(df, c1));
        }
        if constexpr (T > 2) {
            out0[2] = hn::GetLane(hn::SumOfLanes(df, a2));
            out1[2] = hn::GetLane(hn::SumOfLanes(df, c2));
        }
        if constexpr (T > 3) {
            out0[3] = hn::GetLane(hn::SumOfLanes(df, a3));
            out1[3] = hn::GetLane(hn::SumOfLanes(df, c3));
        }
    }
};

// out0[t], out1[t] = dot(x[t], row0), dot(x[t], row1) for T tokens of two plain-dtype rows.
template <DType DT, int T>
HWY_INLINE void dot_plain_pair(const std::uint8_t* row0, const std::uint8_t* row1,
                               std::int64_t cols, const float* x, std::int64_t ldx, float* out0,
                               float* out1) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    PairAccumulators<T> acc;
    std::int64_t c = 0;
    for (; c + n <= cols; c += n) {
        acc.step(load_weights<DT>(row0, c), load_weights<DT>(row1, c), x, ldx, c);
    }
    acc.reduce(out0, out1);
    for (; c < cols; ++c) {
        const float w0 = load_any(DT, row0, c);
        const float w1 = load_any(DT, row1, c);
        for (int t = 0; t < T; ++t) {
            out0[t] += w0 * x[t * ldx + c];
            out1[t] += w1 * x[t * ldx + c];
        }
    }
}

// Both rows against all n tokens in tiles of 4 (then 3, 2, 1); y points at the first row's
// column (y[t * ldy] and y[t * ldy + 1]).
template <DType DT>
HWY_INLINE void pair_all_tokens(const std::uint8_t* row0, const std::uint8_t* row1,
                                std::int64_t cols, const float* x, std::int64_t n, float b0,
                                float b1, float* y, std::int64_t ldy) {
    float out0[4], out1[4];
    std::int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        dot_plain_pair<DT, 4>(row0, row1, cols, x + t * cols, cols, out0, out1);
        for (int i = 0; i < 4; ++i) {
            y[(t + i) * ldy] = out0[i] + b0;
            y[(t + i) * ldy + 1] = out1[i] + b1;
        }
    }
    const std::int64_t left = n - t;
    if (left == 3) dot_plain_pair<DT, 3>(row0, row1, cols, x + t * cols, cols, out0, out1);
    if (left == 2) dot_plain_pair<DT, 2>(row0, row1, cols, x + t * cols, cols, out0, out1);
    if (left == 1) dot_plain_pair<DT, 1>(row0, row1, cols, x + t * cols, cols, out0, out1);
    for (std::int64_t i = 0; i < left; ++i) {
        y[(t + i) * ldy] = out0[i] + b0;
        y[(t + i) * ldy + 1] = out1[i] + b1;
    }
}

// Batched decode (n > 4): rows in pairs; quantized rows are decoded to f32 into row_scratch
// (2 * cols floats) first, once for all tokens.
HWY_INLINE void gemv_row_pairs(const WeightMatrix& w, const float* x, std::int64_t n,
                               std::int64_t r, std::int64_t row_end, const WeightVector* bias,
                               float* y, std::int64_t ldy, float* row_scratch) {
    const bool has_bias = bias != nullptr && bias->valid();
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    for (; r + 2 <= row_end; r += 2) {
        const float b0 = has_bias ? load_any(bias->dtype, bias->data, r) : 0.0f;
        const float b1 = has_bias ? load_any(bias->dtype, bias->data, r + 1) : 0.0f;
        DType dt = w.dtype;
        const std::uint8_t* row0 = base + r * w.row_bytes();
        const std::uint8_t* row1 = row0 + w.row_bytes();
        if (w.quantized()) {
            dequantize_one_row(w, r, row_scratch);
            dequantize_one_row(w, r + 1, row_scratch + w.cols);
            dt = DType::kF32;
            row0 = reinterpret_cast<const std::uint8_t*>(row_scratch);
            row1 = reinterpret_cast<const std::uint8_t*>(row_scratch + w.cols);
        }
        switch (dt) {
            case DType::kF32:
                pair_all_tokens<DType::kF32>(row0, row1, w.cols, x, n, b0, b1, y + r, ldy);
                break;
            case DType::kBF16:
                pair_all_tokens<DType::kBF16>(row0, row1, w.cols, x, n, b0, b1, y + r, ldy);
                break;
            default:
                pair_all_tokens<DType::kF16>(row0, row1, w.cols, x, n, b0, b1, y + r, ldy);
                break;
        }
    }
}

void GemvRows(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t row_begin,
              std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy,
              float* row_scratch, std::int64_t prefetch_bytes) {
    if (n > 4 && row_scratch != nullptr) {
        // Pairs of rows; an odd last row falls through to the single-row loop below.
        gemv_row_pairs(w, x, n, row_begin, row_end, bias, y, ldy, row_scratch);
        row_begin += (row_end - row_begin) / 2 * 2;
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
