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

// Byte offset of column c in a row (c a multiple of 32 for quantized rows).
HWY_INLINE std::int64_t column_bytes(const WeightMatrix& w, std::int64_t c) {
    return w.quantized() ? c * w.bits / 8 : c * static_cast<std::int64_t>(dtype_bits(w.dtype) / 8);
}

// f32 elements [c0, c1) of row r (c0 and, unless c1 == cols, c1 on group boundaries): the
// decoder of every path that widens rows before multiplying (batched decode, prompt panels).
HWY_INLINE void decode_row_block(const WeightMatrix& w, std::int64_t r, std::int64_t c0,
                                 std::int64_t c1, float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes();
    if (!w.quantized()) {
        const std::int64_t count = c1 - c0;
        switch (w.dtype) {
            case DType::kF32:
                std::memcpy(out, row + c0 * 4, static_cast<std::size_t>(count) * 4);
                return;
            case DType::kBF16:
                return dequantize_plain_row<DType::kBF16>(row + c0 * 2, count, out);
            default:
                return dequantize_plain_row<DType::kF16>(row + c0 * 2, count, out);
        }
    }
    const int bits = w.bits;
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = w.cols / group;
    HWY_ALIGN std::uint8_t staged[32];
    for (std::int64_t g = c0 / group; g < c1 / group; ++g) {
        const auto scale = hn::Set(df, load_any(w.scale_dtype, w.scales, r * n_groups + g));
        const auto bias = hn::Set(df, load_any(w.scale_dtype, w.biases, r * n_groups + g));
        for (std::int64_t b = g * group; b < (g + 1) * group; b += 32) {
            const std::uint8_t* codes = stage_block(row + b * bits / 8, bits, staged);
            for (std::int64_t j = 0; j < 32; j += n) {
                hn::StoreU(hn::MulAdd(codes_to_f32(codes + j), scale, bias), df, out + b - c0 + j);
            }
        }
    }
}

HWY_INLINE void dequantize_one_row(const WeightMatrix& w, std::int64_t r, float* out) {
    decode_row_block(w, r, 0, w.cols, out);
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
constexpr int kTileRows = kVectorRegisters / 8;

// out[r * kOut + t] = dot(rows[r], x[t]) for R rows of DT (widened in registers) and T tokens,
// each x load feeding every row; one FMA chain per (row, token) over the columns in order.
// prefetch_bytes > 0: each row's stream is asked for that far ahead.
template <DType DT, int R, int T, int kOut>
HWY_INLINE void dot_rows_tile(const std::uint8_t* const* rows, std::int64_t cols, const float* x,
                              std::int64_t ldx, std::int64_t prefetch_bytes, float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    constexpr std::int64_t kElemBytes = DT == DType::kF32 ? 4 : 2;
    hn::Vec<DF> acc[R][T];
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(df);
    }
    std::int64_t c = 0;
    for (; c + n <= cols; c += n) {
        hn::Vec<DF> w[R];
        for (int r = 0; r < R; ++r) {
            if (prefetch_bytes > 0 && (c * kElemBytes) % 64 == 0) {
                hwy::Prefetch(rows[r] + c * kElemBytes + prefetch_bytes);
            }
            w[r] = load_weights<DT>(rows[r], c);
        }
        for (int t = 0; t < T; ++t) {
            const auto xt = hn::LoadU(df, x + t * ldx + c);
            for (int r = 0; r < R; ++r) acc[r][t] = hn::MulAdd(w[r], xt, acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) {
            float v = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
            for (std::int64_t k = c; k < cols; ++k) v += load_any(DT, rows[r], k) * x[t * ldx + k];
            out[r * kOut + t] = v;
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
        const std::uint8_t* rows[R];
        float b[R];
        for (int i = 0; i < R; ++i) {
            b[i] = has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f;
            if (in_place) {
                rows[i] = static_cast<const std::uint8_t*>(w.data) + (r + i) * w.row_bytes();
            } else {
                dequantize_one_row(w, r + i, row_scratch + i * cols);
                rows[i] = reinterpret_cast<const std::uint8_t*>(row_scratch + i * cols);
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
            dot_rows_tile<DType::kF32, R, 4, 4>(rows, cols, x + t * cols, cols, 0, out);
            store(t, 4);
        }
        const std::int64_t left = n - t;
        if (left == 3) dot_rows_tile<DType::kF32, R, 3, 4>(rows, cols, x + t * cols, cols, 0, out);
        if (left == 2) dot_rows_tile<DType::kF32, R, 2, 4>(rows, cols, x + t * cols, cols, 0, out);
        if (left == 1) dot_rows_tile<DType::kF32, R, 1, 4>(rows, cols, x + t * cols, cols, 0, out);
        store(t, left);
    }
    return r;
}

// ---- Batched decode with the tokens along the vector (gemv_rows_batched) ----
//
// The tiles above put columns along the vector: every (row, token) pair keeps a vector of
// partial sums, reduced across lanes at the end, and every x vector loaded feeds only R rows,
// so 16 tokens' activations (beyond L1) stream from L2 once per row tile. Here the vector holds
// tokens instead: x is transposed once per matmul (xt[c][t]), a row's weight at column c is
// broadcast from its decoded f32 block and multiplied into one vector per token-lane group, so
// each step is R row broadcasts, TV activation loads and R * TV FMAs, with no reduction. Each
// output is one chain over the columns in order, whatever rows share its tile, so every split
// of the rows gives the same bits.

// BatchedMinTokens where the kernel is not used by default.
constexpr std::int64_t kNeverBatched = std::int64_t{1} << 40;

// out[i][j * L + l] = Σ_c row(r0 + i)[c] · xt[c][t_off + j * L + l] for R rows and TV vectors
// of L token lanes. Rows are decoded kBatchedBlockCols columns at a time (a multiple of every
// MLX group size) into `scratch` (R * kBatchedBlockCols floats), which stays in L1 while every
// token multiplies it.
template <class D, int R, int TV>
HWY_INLINE void batched_tile(const WeightMatrix& w, std::int64_t r0, const float* xt,
                             std::int64_t ld, std::int64_t t_off, float* scratch,
                             std::int64_t prefetch_bytes, float* out) {
    const D d;
    const auto L = static_cast<std::int64_t>(hn::Lanes(d));
    const std::int64_t cols = w.cols;
    // Whole groups per block (batched_kernel_supports: groups of at most kBatchedBlockCols).
    const std::int64_t block =
        w.quantized() ? kBatchedBlockCols / w.group_size * w.group_size : kBatchedBlockCols;
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::int64_t row_bytes = w.row_bytes();
    hn::Vec<D> acc[R][TV];
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < TV; ++j) acc[i][j] = hn::Zero(d);
    }
    for (std::int64_t c0 = 0; c0 < cols; c0 += block) {
        const std::int64_t c1 = std::min(cols, c0 + block);
        // Two blocks ahead in every row (past a row's end: the next tile's rows, which follow
        // in memory), so the codes arrive while this block and the next are multiplied.
        if (prefetch_bytes > 0) {
            std::int64_t ahead = c1 + block;
            std::int64_t first_row = r0;
            if (ahead >= cols) {
                ahead -= cols;
                first_row += R;
            }
            const std::int64_t from = column_bytes(w, std::min(ahead, cols));
            const std::int64_t to = column_bytes(w, std::min(ahead + block, cols));
            for (std::int64_t i = first_row; i < std::min(first_row + R, w.rows); ++i) {
                for (std::int64_t at = from; at < to; at += 64) {
                    hwy::Prefetch(base + i * row_bytes + at);
                }
            }
        }
        for (int i = 0; i < R; ++i) {
            decode_row_block(w, r0 + i, c0, c1, scratch + i * kBatchedBlockCols);
        }
        for (std::int64_t c = c0; c < c1; ++c) {
            const float* xc = xt + c * ld + t_off;
            hn::Vec<D> xv[TV];
            for (int j = 0; j < TV; ++j) xv[j] = hn::LoadU(d, xc + j * L);
            const float* wc = scratch + (c - c0);
            for (int i = 0; i < R; ++i) {
                // A constant stride: one base register addresses every row (with a stride
                // known only at run time, 16 rows ran out of registers and reloaded each
                // row's pointer from the stack per column, twice the loads).
                const auto wv = hn::Set(d, wc[i * kBatchedBlockCols]);
                for (int j = 0; j < TV; ++j) acc[i][j] = hn::MulAdd(wv, xv[j], acc[i][j]);
            }
        }
    }
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < TV; ++j) hn::StoreU(acc[i][j], d, out + (i * TV + j) * L);
    }
}

// Rows [r, row_end) in tiles of R for TV token vectors from t_off; returns the first row not
// done (fewer than R left).
template <class D, int R, int TV>
HWY_INLINE std::int64_t batched_rows(const WeightMatrix& w, std::int64_t r, std::int64_t row_end,
                                     const float* xt, std::int64_t ld, std::int64_t n,
                                     std::int64_t t_off, const WeightVector* bias, float* y,
                                     std::int64_t ldy, float* scratch,
                                     std::int64_t prefetch_bytes) {
    const D d;
    const auto L = static_cast<std::int64_t>(hn::Lanes(d));
    const bool has_bias = bias != nullptr && bias->valid();
    HWY_ALIGN float out[R * TV * hn::MaxLanes(D())];
    const std::int64_t t_end = std::min(n, t_off + TV * L);
    for (; r + R <= row_end; r += R) {
        batched_tile<D, R, TV>(w, r, xt, ld, t_off, scratch, prefetch_bytes, out);
        for (int i = 0; i < R; ++i) {
            const float b = has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f;
            for (std::int64_t t = t_off; t < t_end; ++t) {
                y[t * ldy + r + i] = out[i * TV * L + (t - t_off)] + b;
            }
        }
    }
    return r;
}

// Registers hold the accumulators of R rows x TV token vectors: 24 of 32 vector registers
// (AVX-512, AArch64), 12 of 16 elsewhere; the rest hold the activations and the broadcast.
constexpr int kBatchedAccumulators = kVectorRegisters * 3 / 4;

template <class D, int TV>
HWY_INLINE void batched_token_group(const WeightMatrix& w, std::int64_t row_begin,
                                    std::int64_t row_end, const float* xt, std::int64_t ld,
                                    std::int64_t n, std::int64_t t_off, const WeightVector* bias,
                                    float* y, std::int64_t ldy, float* scratch,
                                    std::int64_t prefetch_bytes) {
    constexpr int kRows = std::min(kBatchedMaxRows, kBatchedAccumulators / TV);
    std::int64_t r = row_begin;
    r = batched_rows<D, kRows, TV>(w, r, row_end, xt, ld, n, t_off, bias, y, ldy, scratch,
                                   prefetch_bytes);
    if constexpr (kRows > 4) {
        r = batched_rows<D, 4, TV>(w, r, row_end, xt, ld, n, t_off, bias, y, ldy, scratch,
                                   prefetch_bytes);
    }
    batched_rows<D, 1, TV>(w, r, row_end, xt, ld, n, t_off, bias, y, ldy, scratch, prefetch_bytes);
}

template <class D>
HWY_INLINE void batched_all_tokens(const WeightMatrix& w, std::int64_t row_begin,
                                   std::int64_t row_end, const float* xt, std::int64_t ld,
                                   std::int64_t n, const WeightVector* bias, float* y,
                                   std::int64_t ldy, float* scratch, std::int64_t prefetch_bytes) {
    const auto L = static_cast<std::int64_t>(hn::Lanes(D()));
    // Up to 4 token vectors per pass over the rows (4-lane targets take 17-31 tokens in two).
    for (std::int64_t t = 0; t < n; t += 4 * L) {
        const std::int64_t tv = std::min<std::int64_t>(4, (n - t + L - 1) / L);
        with_constant(
            tv, std::integer_sequence<int, 1, 2, 3, 4>{}, [&](auto k) BRIGADE_INLINE_LAMBDA {
                batched_token_group<D, decltype(k)::value>(w, row_begin, row_end, xt, ld, n, t,
                                                           bias, y, ldy, scratch, prefetch_bytes);
            });
    }
}

void GemvRowsBatched(const WeightMatrix& w, const float* xt, std::int64_t n, std::int64_t row_begin,
                     std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy,
                     float* row_scratch, std::int64_t prefetch_bytes) {
    batched_all_tokens<DF>(w, row_begin, row_end, xt, batched_token_stride(n), n, bias, y, ldy,
                           row_scratch, prefetch_bytes);
}

// Where this kernel beats the dot tiles, by measurement (bench/RESULTS.md, session 6). With
// one token vector a step is R broadcasts and R FMAs, a load per FMA against half a load per
// FMA in the dot tiles, so it needs two vectors of tokens. AVX2 (2-core EPYC, one thread):
// 4-60% faster at 16 and 24 tokens in all 36 kernels_bench pairs, 2-19% slower at 8 (the
// engine on that shared machine was too noisy to show either). AVX-512 (16-core Xeon VM): at
// 24 tokens 38-52% faster on one thread, but on all 16 threads no consistent gain (kernels
// -22% to +17%, engine -17% to +11%), so it stays off there; other
// targets have not been measured and keep the dot tiles (CpuTuning::batched_min_tokens forces
// it, as the tests do on every target).
std::int64_t BatchedMinTokens() {
#if HWY_TARGET == HWY_AVX2
    return static_cast<std::int64_t>(hn::Lanes(DF())) + 1;
#else
    return kNeverBatched;
#endif
}

// ---- BF16 / F16 rows for batches of 5-8 tokens (gemv_rows_plain_tiles) ----
// gemv_rows widens such rows to f32 in memory for its dot tiles once a batch has more than 4
// tokens, and takes them 4 tokens a pass: 5 sequences decoded slower than 4 (bench/RESULTS.md,
// session 25). Here the dot tiles' kernel (dot_rows_tile) takes the rows as they are, widened
// in registers, 2 rows and up to 8 tokens (4 where 16 vector registers hold the accumulators)
// at a time; every split of the rows gives the same bits.
constexpr int kPlainTileRows = 2;
constexpr int kPlainTileTokens = kVectorRegisters >= 32 ? 8 : 4;

template <DType DT>
HWY_INLINE std::int64_t plain_token_tiles(const WeightMatrix& w, const float* x, std::int64_t n,
                                          std::int64_t row_begin, std::int64_t row_end,
                                          const WeightVector* bias, float* y, std::int64_t ldy,
                                          std::int64_t prefetch_bytes) {
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    return for_each_token_tile<kPlainTileRows, kPlainTileTokens>(
        n, row_begin, row_end, bias, y, ldy,
        [&](std::int64_t r, std::int64_t t, auto tokens, float* out) BRIGADE_INLINE_LAMBDA {
            const std::uint8_t* rows[kPlainTileRows];
            for (int i = 0; i < kPlainTileRows; ++i) rows[i] = base + (r + i) * w.row_bytes();
            dot_rows_tile<DT, kPlainTileRows, decltype(tokens)::value, kPlainTileTokens>(
                rows, w.cols, x + t * w.cols, w.cols, prefetch_bytes, out);
        });
}

std::int64_t GemvRowsPlainTiles(const WeightMatrix& w, const float* x, std::int64_t n,
                                std::int64_t row_begin, std::int64_t row_end,
                                const WeightVector* bias, float* y, std::int64_t ldy,
                                std::int64_t prefetch_bytes) {
    if (w.dtype == DType::kBF16) {
        return plain_token_tiles<DType::kBF16>(w, x, n, row_begin, row_end, bias, y, ldy,
                                               prefetch_bytes);
    }
    if (w.dtype == DType::kF16) {
        return plain_token_tiles<DType::kF16>(w, x, n, row_begin, row_end, bias, y, ldy,
                                              prefetch_bytes);
    }
    return row_begin;
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
HWY_EXPORT(GemvRowsPlainTiles);
HWY_EXPORT(GemvRowsBatched);
HWY_EXPORT(BatchedMinTokens);
HWY_EXPORT(DequantizeRows);

void gemv_rows(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t row_begin,
               std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy,
               float* row_scratch, std::int64_t prefetch_bytes) {
    HWY_DYNAMIC_DISPATCH(GemvRows)
    (w, x, n, row_begin, row_end, bias, y, ldy, row_scratch, prefetch_bytes);
}

std::int64_t gemv_rows_plain_tiles(const WeightMatrix& w, const float* x, std::int64_t n,
                                   std::int64_t row_begin, std::int64_t row_end,
                                   const WeightVector* bias, float* y, std::int64_t ldy,
                                   std::int64_t prefetch_bytes) {
    return HWY_DYNAMIC_DISPATCH(GemvRowsPlainTiles)(w, x, n, row_begin, row_end, bias, y, ldy,
                                                    prefetch_bytes);
}

std::int64_t batched_token_stride(std::int64_t n) {
    return (n + kBatchedMaxLanes - 1) / kBatchedMaxLanes * kBatchedMaxLanes;
}

std::int64_t batched_row_scratch_floats() { return kBatchedMaxRows * kBatchedBlockCols; }

bool batched_kernel_supports(const WeightMatrix& w) {
    return !w.quantized() || w.group_size <= 256;
}

std::int64_t batched_min_tokens() { return HWY_DYNAMIC_DISPATCH(BatchedMinTokens)(); }

void transpose_tokens(const float* x, std::int64_t n, std::int64_t cols, std::int64_t c_begin,
                      std::int64_t c_end, float* xt) {
    const std::int64_t ld = batched_token_stride(n);
    for (std::int64_t c = c_begin; c < c_end; ++c) {
        float* dst = xt + c * ld;
        for (std::int64_t t = 0; t < n; ++t) dst[t] = x[t * cols + c];
        for (std::int64_t t = n; t < ld; ++t) dst[t] = 0.0f;
    }
}

void gemv_rows_batched(const WeightMatrix& w, const float* xt, std::int64_t n,
                       std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                       float* y, std::int64_t ldy, float* row_scratch,
                       std::int64_t prefetch_bytes) {
    HWY_DYNAMIC_DISPATCH(GemvRowsBatched)
    (w, xt, n, row_begin, row_end, bias, y, ldy, row_scratch, prefetch_bytes);
}

void dequantize_rows(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                     float* out) {
    HWY_DYNAMIC_DISPATCH(DequantizeRows)(w, row_begin, row_end, out);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
