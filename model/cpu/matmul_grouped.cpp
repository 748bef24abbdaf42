// Decode GEMV for MLX affine 4- and 8-bit weights with f32 activations, factored per group
// (Highway, one instantiation per target).
//
// Why: the plain fused kernel (matmul.cpp) turns every code into scale*q + bias before its
// FMA and, for 4-bit, first unpacks each block through a staging buffer in L1: about 15 vector
// instructions per 32 codes, which caps 4-bit decode near half the memory bandwidth of a
// 16-core Xeon. Here a row is computed as
//
//     y = Σ_g scale_g · (Σ_{c∈g} q_c · x_c) + Σ_g bias_g · (Σ_{c∈g} x_c)
//
// The group sums of x are computed once per matmul and shared by every row, so the inner loop
// is only widen-codes, convert, FMA; scale and bias are applied once per group. 4-bit codes are
// split into nibbles in registers (low nibble = even element, high = odd) and x is stored once
// per matmul in that order, so nothing is staged. All arithmetic stays f32: the result differs
// from the reference only by summation order (tests/unit/cpu hold it to the same tolerance as
// the other f32 kernels).
//
// It serves batches up to CpuTuning::grouped_max_tokens (8, or 16 on AMD with AVX-512): one
// row and up to 4 tokens at a time, and batches of 5 and more in token tiles (below: AVX-512's
// 2 rows x 8 tokens, and a portable form for the other targets); larger batches decode each
// row to f32 once and use matmul.cpp's tiles.

#include <algorithm>
#include <cstring>

#include "model/cpu/kernels.hpp"
#include "model/cpu/weight_decode.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu/matmul_grouped.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>
#include "model/cpu/decode-inl.hpp"
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 f32 lanes: a chunk of 2 * lanes codes must lie inside one group (groups may be
// 32 wide).
using DF = hn::CappedTag<float, 16>;
using DI = hn::Rebind<std::int32_t, DF>;
using D8 = hn::Rebind<std::uint8_t, DF>;

HWY_INLINE std::int64_t lanes() { return static_cast<std::int64_t>(hn::Lanes(DF())); }
// Codes per step of the row kernels where the vector length is known when compiling (2 lanes'
// worth; lanes() equals MaxLanes on every target but the scalable ones).
constexpr std::int64_t kChunk = 2 * static_cast<std::int64_t>(hn::MaxLanes(DF()));

// Codes [c, c + 2n) of a 4- or 8-bit row (in the kernel's order) as two f32 vectors.
template <int BITS>
HWY_INLINE void load_codes(const std::uint8_t* row, std::int64_t c, hn::Vec<DF>& lo,
                           hn::Vec<DF>& hi) {
    const DF df;
    const DI di;
    const D8 d8;
    const auto n = lanes();
    if constexpr (BITS == 4) {
        const auto v = hn::PromoteTo(di, hn::LoadU(d8, row + c / 2));
        lo = hn::ConvertTo(df, hn::And(v, hn::Set(di, 0x0F)));
        hi = hn::ConvertTo(df, hn::ShiftRight<4>(v));
    } else {
        static_assert(BITS == 8);
        lo = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, row + c)));
        hi = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, row + c + n)));
    }
}

// Per-token accumulators of up to 4 tokens: p/q sum codes·x inside the current group (two
// chains), f sums scale·(p+q) over groups; b holds bias·Σx over groups. Named variables
// rather than arrays (see matmul.cpp).
template <int T>
struct GroupAcc {
    hn::Vec<DF> p0, q0, p1, q1, p2, q2, p3, q3, f0, f1, f2, f3;
    float b0 = 0, b1 = 0, b2 = 0, b3 = 0;  // Σ_g bias_g · Σx_g, added by the caller
    GroupAcc() {
        const DF df;
        p0 = q0 = p1 = q1 = p2 = q2 = p3 = q3 = f0 = f1 = f2 = f3 = hn::Zero(df);
    }
    HWY_INLINE void step(hn::Vec<DF> lo, hn::Vec<DF> hi, const float* x, std::int64_t ldx,
                         std::int64_t c, std::int64_t n) {
        const DF df;
        p0 = hn::MulAdd(lo, hn::LoadU(df, x + c), p0);
        q0 = hn::MulAdd(hi, hn::LoadU(df, x + c + n), q0);
        if constexpr (T > 1) {
            p1 = hn::MulAdd(lo, hn::LoadU(df, x + ldx + c), p1);
            q1 = hn::MulAdd(hi, hn::LoadU(df, x + ldx + c + n), q1);
        }
        if constexpr (T > 2) {
            p2 = hn::MulAdd(lo, hn::LoadU(df, x + 2 * ldx + c), p2);
            q2 = hn::MulAdd(hi, hn::LoadU(df, x + 2 * ldx + c + n), q2);
        }
        if constexpr (T > 3) {
            p3 = hn::MulAdd(lo, hn::LoadU(df, x + 3 * ldx + c), p3);
            q3 = hn::MulAdd(hi, hn::LoadU(df, x + 3 * ldx + c + n), q3);
        }
    }
    // Applies the group's scale (broadcast from memory, so no shuffle port is used) and
    // restarts the in-group sums.
    HWY_INLINE void end_group(const float* scale) {
        const DF df;
        const auto s = hn::Set(df, *scale);
        const auto z = hn::Zero(df);
        f0 = hn::MulAdd(hn::Add(p0, q0), s, f0);
        p0 = q0 = z;
        if constexpr (T > 1) {
            f1 = hn::MulAdd(hn::Add(p1, q1), s, f1);
            p1 = q1 = z;
        }
        if constexpr (T > 2) {
            f2 = hn::MulAdd(hn::Add(p2, q2), s, f2);
            p2 = q2 = z;
        }
        if constexpr (T > 3) {
            f3 = hn::MulAdd(hn::Add(p3, q3), s, f3);
            p3 = q3 = z;
        }
    }
    HWY_INLINE void reduce(float* out) const {
        const DF df;
        out[0] = hn::GetLane(hn::SumOfLanes(df, f0)) + b0;
        if constexpr (T > 1) out[1] = hn::GetLane(hn::SumOfLanes(df, f1)) + b1;
        if constexpr (T > 2) out[2] = hn::GetLane(hn::SumOfLanes(df, f2)) + b2;
        if constexpr (T > 3) out[3] = hn::GetLane(hn::SumOfLanes(df, f3)) + b3;
    }
};

// The weight matrix as the row kernels see it.
struct GroupedRows {
    const WeightMatrix& w;
    std::int64_t n_groups;
    std::int64_t prefetch_bytes;       // software prefetch distance in the code stream; 0 = none
    std::int64_t n_affine;             // scales (and biases) in the matrix: rows * n_groups
    std::int64_t next_tile_row_bytes;  // TilePrefetch's next_tile_max_row_bytes
};

// out[t] = dot(row r, x[t]) for T tokens starting at token t0; `codes` is the packed row.
template <int BITS, int T>
HWY_INLINE void dot_grouped(const std::uint8_t* codes, const GroupedRows& m, std::int64_t r,
                            const GroupedActivations& xa, std::int64_t t0, float* out) {
    const auto n = lanes();
    const std::int64_t group = m.w.group_size;
    const std::int64_t cols = m.w.cols;
    const std::int64_t n_groups = m.n_groups;
    const float* x = xa.x + t0 * cols;
    const float* gsum = xa.group_sum + t0 * n_groups;
    HWY_ALIGN float scale[kGroupChunk];
    HWY_ALIGN float bias[kGroupChunk];
    GroupAcc<T> acc;
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, n_groups - g0);
        widen_affine(m.w.scale_dtype, m.w.scales, r * n_groups + g0, count, m.n_affine, scale);
        widen_affine(m.w.scale_dtype, m.w.biases, r * n_groups + g0, count, m.n_affine, bias);
        acc.b0 += bias_dot(bias, gsum + g0, count);
        if constexpr (T > 1) acc.b1 += bias_dot(bias, gsum + n_groups + g0, count);
        if constexpr (T > 2) acc.b2 += bias_dot(bias, gsum + 2 * n_groups + g0, count);
        if constexpr (T > 3) acc.b3 += bias_dot(bias, gsum + 3 * n_groups + g0, count);
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * group;
            if (m.prefetch_bytes > 0) {
                hwy::Prefetch(codes + c_begin * BITS / 8 + m.prefetch_bytes);
            }
            for (std::int64_t c = c_begin; c < c_begin + group; c += 2 * n) {
                hn::Vec<DF> lo, hi;
                load_codes<BITS>(codes, c, lo, hi);
                acc.step(lo, hi, x, cols, c, n);
            }
            acc.end_group(scale + g);
        }
    }
    acc.reduce(out);
}

// All n tokens against one row in tiles of 4 (then 3, 2, 1).
template <int BITS>
HWY_INLINE void row_all_tokens(const std::uint8_t* codes, const GroupedRows& m, std::int64_t r,
                               const GroupedActivations& xa, std::int64_t n, float b, float* y,
                               std::int64_t ldy) {
    float out[4];
    std::int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        dot_grouped<BITS, 4>(codes, m, r, xa, t, out);
        for (int i = 0; i < 4; ++i) y[(t + i) * ldy + r] = out[i] + b;
    }
    const std::int64_t left = n - t;
    if (left == 3) dot_grouped<BITS, 3>(codes, m, r, xa, t, out);
    if (left == 2) dot_grouped<BITS, 2>(codes, m, r, xa, t, out);
    if (left == 1) dot_grouped<BITS, 1>(codes, m, r, xa, t, out);
    for (std::int64_t i = 0; i < left; ++i) y[(t + i) * ldy + r] = out[i] + b;
}

// Rows per pass of the one-token kernel below: a single row's FMA chains wait on their latency
// (see dot_q4_lookup_rows), so rows go several at a time, as many as the registers hold (3
// accumulators per row plus the codes of each).
constexpr int kGroupedRows = kVectorRegisters / 8;

// out[i] = dot(row r0 + i, x) for R rows and one token: dot_grouped<BITS, 1> on R rows at once,
// each row summed in the same order.
template <int BITS, int R>
HWY_INLINE void dot_grouped_rows(const std::uint8_t* base, const GroupedRows& m, std::int64_t r0,
                                 const GroupedActivations& xa, float* out) {
    const DF df;
    const auto n = lanes();
    const std::int64_t group = m.w.group_size;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = m.w.row_bytes();
    const std::uint8_t* codes[R];
    hn::Vec<DF> p[R], q[R], f[R];
    float bias_sum[R];
    for (int i = 0; i < R; ++i) {
        codes[i] = base + (r0 + i) * row_bytes;
        p[i] = q[i] = f[i] = hn::Zero(df);
        bias_sum[i] = 0.0f;
    }
    HWY_ALIGN float scale[R][kGroupChunk];
    HWY_ALIGN float bias[R][kGroupChunk];
    TilePrefetch<R> prefetch(m.prefetch_bytes, row_bytes, m.next_tile_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, n_groups - g0);
        widen_tile_affine<R>(m.w, m.n_groups, r0, g0, count, scale, bias);
        for (int i = 0; i < R; ++i) bias_sum[i] += bias_dot(bias[i], xa.group_sum + g0, count);
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * group;
            prefetch.ahead_of(codes, c_begin * BITS / 8);
            const auto step = [&](std::int64_t c) {
                const auto x_lo = hn::LoadU(df, xa.x + c);
                const auto x_hi = hn::LoadU(df, xa.x + c + n);
                for (int i = 0; i < R; ++i) {
                    hn::Vec<DF> lo, hi;
                    load_codes<BITS>(codes[i], c, lo, hi);
                    p[i] = hn::MulAdd(lo, x_lo, p[i]);
                    q[i] = hn::MulAdd(hi, x_hi, q[i]);
                }
            };
            // A group of 64 is unrolled where the step is known when compiling (4 steps on
            // AVX2, 2 on AVX-512), the same operations in the same order. Here (one thread, from
            // cache, alternated rounds) AVX2 4-bit q/o 896x896 7.2-8.1 -> 8.5-8.6 GB/s and
            // gate/up 6.5-7.9 -> 8.2; AVX-512 8-bit q/o 20.3-22.2 -> 21.9-23.2 (bench/RESULTS.md,
            // session 21).
            if (group == 64 && 2 * n == kChunk) {
#pragma GCC unroll 8
                for (std::int64_t k = 0; k < 64 / kChunk; ++k) step(c_begin + k * kChunk);
            } else {
                for (std::int64_t c = c_begin; c < c_begin + group; c += 2 * n) step(c);
            }
            for (int i = 0; i < R; ++i) {
                f[i] = hn::MulAdd(hn::Add(p[i], q[i]), hn::Set(df, scale[i][g]), f[i]);
                p[i] = q[i] = hn::Zero(df);
            }
        }
    }
    for (int i = 0; i < R; ++i) out[i] = hn::GetLane(hn::SumOfLanes(df, f[i])) + bias_sum[i];
}

// One token, rows in tiles of kGroupedRows from row_begin; returns the first row not done. Kept
// out of line so the code of the 2-4 token path around it stays as it was.
template <int BITS>
HWY_NOINLINE std::int64_t grouped_rows_one_token(const GroupedRows& m, const GroupedActivations& xa,
                                                 std::int64_t row_begin, std::int64_t row_end,
                                                 const WeightVector* bias, float* y) {
    const bool has_bias = bias != nullptr && bias->valid();
    const auto* base = static_cast<const std::uint8_t*>(m.w.data);
    float out[kGroupedRows];
    std::int64_t r = row_begin;
    for (; r + kGroupedRows <= row_end; r += kGroupedRows) {
        dot_grouped_rows<BITS, kGroupedRows>(base, m, r, xa, out);
        for (int i = 0; i < kGroupedRows; ++i) {
            y[r + i] = out[i] + (has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f);
        }
    }
    return r;
}

template <int BITS>
void gemv_rows_grouped(const WeightMatrix& w, const GroupedActivations& xa, std::int64_t n,
                       std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                       float* y, std::int64_t ldy) {
    const bool has_bias = bias != nullptr && bias->valid();
    const GroupedRows m{w, w.cols / w.group_size, xa.prefetch_bytes,
                        w.rows * (w.cols / w.group_size), xa.next_tile_prefetch_row_bytes};
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    std::int64_t r = row_begin;
    if (xa.multi_row && n == 1)
        r = grouped_rows_one_token<BITS>(m, xa, row_begin, row_end, bias, y);
    for (; r < row_end; ++r) {
        const float b = has_bias ? load_any(bias->dtype, bias->data, r) : 0.0f;
        row_all_tokens<BITS>(base + r * w.row_bytes(), m, r, xa, n, b, y, ldy);
    }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// AVX-512 4-bit rows through a 16-entry lookup table: vpermps uses only the low 4 bits of each
// lane's index, so the low nibble needs no mask, and a lookup replaces both the int->float
// conversion and the affine map: the table holds scale*q + bias of the group for q = 0..15.
// Per 32 codes that is widen, 2 lookups, 1 shift and the FMAs (the generic path also needs an
// AND and 2 conversions, and p0 runs out first). Numbers as `dequantize_row`'s w, summed in a
// different order. Other targets use the generic grouped path.

template <int T>
HWY_INLINE void dot_q4_lookup(const std::uint8_t* codes, const GroupedRows& m, std::int64_t r,
                              const GroupedActivations& xa, std::int64_t t0, float* out) {
    const std::int64_t group = m.w.group_size;
    const std::int64_t cols = m.w.cols;
    const std::int64_t n_groups = m.n_groups;
    const float* x = xa.x + t0 * cols;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 a[T], b[T];
    for (int t = 0; t < T; ++t) a[t] = b[t] = _mm512_setzero_ps();
    HWY_ALIGN float scale[kGroupChunk];
    HWY_ALIGN float bias[kGroupChunk];
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, n_groups - g0);
        widen_affine(m.w.scale_dtype, m.w.scales, r * n_groups + g0, count, m.n_affine, scale);
        widen_affine(m.w.scale_dtype, m.w.biases, r * n_groups + g0, count, m.n_affine, bias);
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * group;
            if (m.prefetch_bytes > 0) hwy::Prefetch(codes + c_begin / 2 + m.prefetch_bytes);
            const __m512 table =
                _mm512_fmadd_ps(iota, _mm512_set1_ps(scale[g]), _mm512_set1_ps(bias[g]));
            for (std::int64_t c = c_begin; c < c_begin + group; c += 32) {
                const __m512i v = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c / 2)));
                const __m512 lo = _mm512_permutexvar_ps(v, table);
                const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
                for (int t = 0; t < T; ++t) {
                    a[t] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + t * cols + c), a[t]);
                    b[t] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + t * cols + c + 16), b[t]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(a[t], b[t]));
}

// dot_q4_lookup<1> on R rows at once. A single row has only two FMA chains and waits on their
// latency (measured on a 16-core Xeon, one thread, cache-resident 896x896: 4.4 GB/s one row at
// a time, 13.1 GB/s four at a time); here every x vector loaded feeds R rows and the per-group
// work of the rows overlaps. With 2-4 tokens a row already has 4-8 chains, and two rows at a
// time measured slower there (register pressure), so they keep dot_q4_lookup. Each row's sums
// are the same either way.
template <int R>
HWY_INLINE void dot_q4_lookup_rows(const std::uint8_t* base, const GroupedRows& m, std::int64_t r0,
                                   const GroupedActivations& xa, float* out) {
    const std::int64_t group = m.w.group_size;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = m.w.row_bytes();
    const float* x = xa.x;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 a[R], b[R];
    for (int i = 0; i < R; ++i) a[i] = b[i] = _mm512_setzero_ps();
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    HWY_ALIGN float scale[R][kGroupChunk];
    HWY_ALIGN float bias[R][kGroupChunk];
    TilePrefetch<R> prefetch(m.prefetch_bytes, row_bytes, m.next_tile_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, n_groups - g0);
        widen_tile_affine<R>(m.w, m.n_groups, r0, g0, count, scale, bias);
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * group;
            __m512 table[R];
            prefetch.ahead_of(codes, c_begin / 2);
            for (int i = 0; i < R; ++i) {
                table[i] =
                    _mm512_fmadd_ps(iota, _mm512_set1_ps(scale[i][g]), _mm512_set1_ps(bias[i][g]));
            }
            for (std::int64_t c = c_begin; c < c_begin + group; c += 32) {
                __m512 lo[R], hi[R];
                for (int i = 0; i < R; ++i) {
                    const __m512i v = _mm512_cvtepu8_epi32(
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + c / 2)));
                    lo[i] = _mm512_permutexvar_ps(v, table[i]);
                    hi[i] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table[i]);
                }
                const __m512 xl = _mm512_loadu_ps(x + c);
                const __m512 xh = _mm512_loadu_ps(x + c + 16);
                for (int i = 0; i < R; ++i) {
                    a[i] = _mm512_fmadd_ps(lo[i], xl, a[i]);
                    b[i] = _mm512_fmadd_ps(hi[i], xh, b[i]);
                }
            }
        }
    }
    for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(a[i], b[i]));
}

// As grouped_rows_one_token, 4 rows at a time through the lookup table.
HWY_NOINLINE std::int64_t q4_lookup_one_token(const GroupedRows& m, const GroupedActivations& xa,
                                              std::int64_t row_begin, std::int64_t row_end,
                                              const WeightVector* bias, float* y) {
    const bool has_bias = bias != nullptr && bias->valid();
    const auto* base = static_cast<const std::uint8_t*>(m.w.data);
    float out[4];
    std::int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
        dot_q4_lookup_rows<4>(base, m, r, xa, out);
        for (int i = 0; i < 4; ++i) {
            y[r + i] = out[i] + (has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f);
        }
    }
    return r;
}

void gemv_rows_q4_lookup(const WeightMatrix& w, const GroupedActivations& xa, std::int64_t n,
                         std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                         float* y, std::int64_t ldy) {
    const bool has_bias = bias != nullptr && bias->valid();
    const GroupedRows m{w, w.cols / w.group_size, xa.prefetch_bytes,
                        w.rows * (w.cols / w.group_size), xa.next_tile_prefetch_row_bytes};
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    std::int64_t r = row_begin;
    float out[4];
    if (xa.multi_row && n == 1) r = q4_lookup_one_token(m, xa, row_begin, row_end, bias, y);
    for (; r < row_end; ++r) {
        const float b = has_bias ? load_any(bias->dtype, bias->data, r) : 0.0f;
        const std::uint8_t* row = base + r * w.row_bytes();
        std::int64_t t = 0;
        for (; t + 4 <= n; t += 4) {
            dot_q4_lookup<4>(row, m, r, xa, t, out);
            for (int i = 0; i < 4; ++i) y[(t + i) * ldy + r] = out[i] + b;
        }
        const std::int64_t left = n - t;
        if (left == 3) dot_q4_lookup<3>(row, m, r, xa, t, out);
        if (left == 2) dot_q4_lookup<2>(row, m, r, xa, t, out);
        if (left == 1) dot_q4_lookup<1>(row, m, r, xa, t, out);
        for (std::int64_t i = 0; i < left; ++i) y[(t + i) * ldy + r] = out[i] + b;
    }
}
#endif

// The group walk of the token tiles below (AVX-512's and the portable ones): for R rows from
// r0, each chunk of groups' scales and biases widened once, the codes asked for ahead, then
// group(c_begin, s, b) per group, with s[i] and b[i] row i's scale and bias of the group whose
// first column is c_begin.
template <int BITS, int R, class Group>
HWY_INLINE void for_each_tile_group(const GroupedRows& m, std::int64_t r0,
                                    const std::uint8_t* const* codes, Group&& group) {
    HWY_ALIGN float scale[R][kGroupChunk];
    HWY_ALIGN float bias[R][kGroupChunk];
    for (std::int64_t g0 = 0; g0 < m.n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, m.n_groups - g0);
        widen_tile_affine<R>(m.w, m.n_groups, r0, g0, count, scale, bias);
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * m.w.group_size;
            float s[R], b[R];
            for (int i = 0; i < R; ++i) {
                if (m.prefetch_bytes > 0) {
                    hwy::Prefetch(codes[i] + c_begin * BITS / 8 + m.prefetch_bytes);
                }
                s[i] = scale[i][g];
                b[i] = bias[i][g];
            }
            group(c_begin, s, b);
        }
    }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// ---- Batches of 5 and more tokens (AVX-512) ----
// The kernels above take one row at a time and up to 4 tokens, so a larger batch either ran
// them again per 4 tokens, decoding every code again and reloading every activation per row, or
// (before session 25) decoded each row to f32 in memory for matmul.cpp's dot tiles: on a Zen 4
// core 5 sequences then decoded slower than 4 (bench/RESULTS.md, session 25). Here 2 rows and
// up to 8 tokens go together: each code is decoded in registers once per 8 tokens (4-bit through
// the group's lookup table, 8-bit converted and scaled), each activation vector loaded feeds
// both rows, and each (row, token) pair is one FMA chain: 16 accumulators, 16 chains deep
// enough for the FMA latency. Numbers as `dequantize_row`'s w times x, summed in a different
// order (each pair's chain runs over the columns in order, so every split of the rows gives
// the same bits).

constexpr int kTileTokens = 8;
constexpr int kTileRows = 2;

// out[i * kTileTokens + t] = dot(row r0 + i, x[t0 + t]) for R rows and T tokens.
template <int BITS, int R, int T>
HWY_INLINE void dot_token_tile(const std::uint8_t* base, const GroupedRows& m, std::int64_t r0,
                               const GroupedActivations& xa, std::int64_t t0, float* out) {
    const std::int64_t group = m.w.group_size;
    const std::int64_t cols = m.w.cols;
    const std::int64_t row_bytes = m.w.row_bytes();
    const float* x = xa.x + t0 * cols;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 a[R][T];
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) a[i][t] = _mm512_setzero_ps();
    }
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    for_each_tile_group<BITS, R>(
        m, r0, codes,
        [&](std::int64_t c_begin, const float* sg, const float* bg) BRIGADE_INLINE_LAMBDA {
            // 4-bit: the group's scale*q + bias for q = 0..15; 8-bit: scale and bias.
            __m512 table[R], s[R], b[R];
            for (int i = 0; i < R; ++i) {
                s[i] = _mm512_set1_ps(sg[i]);
                b[i] = _mm512_set1_ps(bg[i]);
                if constexpr (BITS == 4) table[i] = _mm512_fmadd_ps(iota, s[i], b[i]);
            }
            for (std::int64_t c = c_begin; c < c_begin + group; c += 32) {
                // Weights of columns [c, c + 16) and [c + 16, c + 32) as x holds them (4-bit:
                // even elements, then odd ones; 8-bit: in order).
                __m512 lo[R], hi[R];
                for (int i = 0; i < R; ++i) {
                    if constexpr (BITS == 4) {
                        const __m512i v = _mm512_cvtepu8_epi32(
                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + c / 2)));
                        lo[i] = _mm512_permutexvar_ps(v, table[i]);
                        hi[i] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table[i]);
                    } else {
                        const auto* p = reinterpret_cast<const __m128i*>(codes[i] + c);
                        lo[i] = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(p))), s[i],
                            b[i]);
                        hi[i] = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(p + 1))), s[i],
                            b[i]);
                    }
                }
                for (int t = 0; t < T; ++t) {
                    const __m512 xl = _mm512_loadu_ps(x + t * cols + c);
                    for (int i = 0; i < R; ++i) a[i][t] = _mm512_fmadd_ps(lo[i], xl, a[i][t]);
                }
                for (int t = 0; t < T; ++t) {
                    const __m512 xh = _mm512_loadu_ps(x + t * cols + c + 16);
                    for (int i = 0; i < R; ++i) a[i][t] = _mm512_fmadd_ps(hi[i], xh, a[i][t]);
                }
            }
        });
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) out[i * kTileTokens + t] = _mm512_reduce_add_ps(a[i][t]);
    }
}

// Rows [row_begin, row_end) of n >= 5 tokens in tiles of kTileRows rows x kTileTokens tokens,
// 16 rows at a time so that one block of tokens' activations stays in L1 across them. Returns
// the first row not done (at most one is left). Kept out of line: inlined into the one-row
// loops, its instantiations slowed those on two SMT threads (a Zen 4 VM, 4 sequences 50 -> 38
// tok/s; a larger loop body).
template <int BITS>
HWY_NOINLINE std::int64_t grouped_token_tiles(const GroupedRows& m, const GroupedActivations& xa,
                                              std::int64_t n, std::int64_t row_begin,
                                              std::int64_t row_end, const WeightVector* bias,
                                              float* y, std::int64_t ldy) {
    const auto* base = static_cast<const std::uint8_t*>(m.w.data);
    return for_each_token_tile<kTileRows, kTileTokens>(
        n, row_begin, row_end, bias, y, ldy,
        [&](std::int64_t r, std::int64_t t, auto tokens, float* out) BRIGADE_INLINE_LAMBDA {
            dot_token_tile<BITS, kTileRows, decltype(tokens)::value>(base, m, r, xa, t, out);
        });
}
#endif

#if !(HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
// ---- Batches of 5 and more tokens (other targets) ----
// The same tiles as the AVX-512 ones above in Highway's portable operations: each code is
// decoded in registers (converted, scaled and shifted by the group's bias, as `dequantize_row`
// computes w) once per block of up to 8 tokens, instead of once per 4 tokens in the one-row
// loop, which made 5 sequences slower than 4 (a 4 + 1 pass). One row per tile where the target
// has 16 vector registers (8 accumulators, the two decoded vectors, scale and bias), two where
// it has 32. Measured with the kernels held to AVX2 on a Zen 4 (bench/RESULTS.md, session 26):
// Qwen2.5-0.5B 4-bit x5 +30-37%, x8 +10-13%, 8-bit x5 +19-24%; Llama-3.2-1B x5 +13-19%, x6-x8
// within -4%, where 8 tokens' activations of 2048 columns and more leave L1 for every row.
// NEON takes the two-row form; its speed is not measured.
constexpr int kGenericTileTokens = 8;
constexpr int kGenericTileRows = kVectorRegisters >= 32 ? 2 : 1;

// out[i * kGenericTileTokens + t] = dot(row r0 + i, x[t0 + t]) for R rows and T tokens.
template <int BITS, int R, int T>
HWY_INLINE void dot_token_tile_generic(const std::uint8_t* base, const GroupedRows& m,
                                       std::int64_t r0, const GroupedActivations& xa,
                                       std::int64_t t0, float* out) {
    const DF df;
    const auto n = lanes();
    const std::int64_t group = m.w.group_size;
    const std::int64_t cols = m.w.cols;
    const std::int64_t row_bytes = m.w.row_bytes();
    const float* x = xa.x + t0 * cols;
    hn::Vec<DF> a[R][T];
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) a[i][t] = hn::Zero(df);
    }
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    for_each_tile_group<BITS, R>(
        m, r0, codes,
        [&](std::int64_t c_begin, const float* sg, const float* bg) BRIGADE_INLINE_LAMBDA {
            hn::Vec<DF> s[R], b[R];
            for (int i = 0; i < R; ++i) {
                s[i] = hn::Set(df, sg[i]);
                b[i] = hn::Set(df, bg[i]);
            }
            for (std::int64_t c = c_begin; c < c_begin + group; c += 2 * n) {
                // Weights of columns [c, c + 2n) in x's order (4-bit: even elements, then odd).
                hn::Vec<DF> lo[R], hi[R];
                for (int i = 0; i < R; ++i) {
                    load_codes<BITS>(codes[i], c, lo[i], hi[i]);
                    lo[i] = hn::MulAdd(lo[i], s[i], b[i]);
                    hi[i] = hn::MulAdd(hi[i], s[i], b[i]);
                }
                for (int t = 0; t < T; ++t) {
                    const auto xl = hn::LoadU(df, x + t * cols + c);
                    for (int i = 0; i < R; ++i) a[i][t] = hn::MulAdd(lo[i], xl, a[i][t]);
                }
                for (int t = 0; t < T; ++t) {
                    const auto xh = hn::LoadU(df, x + t * cols + c + n);
                    for (int i = 0; i < R; ++i) a[i][t] = hn::MulAdd(hi[i], xh, a[i][t]);
                }
            }
        });
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) {
            out[i * kGenericTileTokens + t] = hn::GetLane(hn::SumOfLanes(df, a[i][t]));
        }
    }
}

// As grouped_token_tiles above, for the other targets; kept out of line for the same reason.
template <int BITS>
HWY_NOINLINE std::int64_t grouped_token_tiles_generic(const GroupedRows& m,
                                                      const GroupedActivations& xa, std::int64_t n,
                                                      std::int64_t row_begin, std::int64_t row_end,
                                                      const WeightVector* bias, float* y,
                                                      std::int64_t ldy) {
    const auto* base = static_cast<const std::uint8_t*>(m.w.data);
    return for_each_token_tile<kGenericTileRows, kGenericTileTokens>(
        n, row_begin, row_end, bias, y, ldy,
        [&](std::int64_t r, std::int64_t t, auto tokens, float* out) BRIGADE_INLINE_LAMBDA {
            dot_token_tile_generic<BITS, kGenericTileRows, decltype(tokens)::value>(base, m, r, xa,
                                                                                    t, out);
        });
}
#endif

void GemvRowsGrouped(const WeightMatrix& w, const GroupedActivations& xa, std::int64_t n,
                     std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                     float* y, std::int64_t ldy) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    if (n > 4) {
        const GroupedRows m{w, w.cols / w.group_size, xa.prefetch_bytes,
                            w.rows * (w.cols / w.group_size), xa.next_tile_prefetch_row_bytes};
        row_begin = w.bits == 4
                        ? grouped_token_tiles<4>(m, xa, n, row_begin, row_end, bias, y, ldy)
                        : grouped_token_tiles<8>(m, xa, n, row_begin, row_end, bias, y, ldy);
    }
#else
    if (n > 4) {
        const GroupedRows m{w, w.cols / w.group_size, xa.prefetch_bytes,
                            w.rows * (w.cols / w.group_size), xa.next_tile_prefetch_row_bytes};
        row_begin =
            w.bits == 4
                ? grouped_token_tiles_generic<4>(m, xa, n, row_begin, row_end, bias, y, ldy)
                : grouped_token_tiles_generic<8>(m, xa, n, row_begin, row_end, bias, y, ldy);
    }
#endif
    if (w.bits == 4) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
        // 16 lanes: a chunk of 32 codes is 16 bytes, and x is in the same nibble order.
        if (xa.q4_lookup) return gemv_rows_q4_lookup(w, xa, n, row_begin, row_end, bias, y, ldy);
#endif
        gemv_rows_grouped<4>(w, xa, n, row_begin, row_end, bias, y, ldy);
    } else {
        gemv_rows_grouped<8>(w, xa, n, row_begin, row_end, bias, y, ldy);
    }
}

bool HasGroupedTokenTiles() {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    return true;
#else
    return false;
#endif
}

void PrepareGroupedActivations(const WeightMatrix& w, const float* x, std::int64_t begin,
                               std::int64_t end, float* xp, float* group_sum) {
    const DF df;
    const std::int64_t group = w.group_size;
    const auto n = lanes();
    for (std::int64_t i = begin; i < end; ++i) {
        // Group i covers elements [i * group, (i + 1) * group) of the [n, cols] array.
        const float* xg = x + i * group;
        float* dst = xp + i * group;
        auto sum = hn::Zero(df);
        for (std::int64_t c = 0; c < group; c += 2 * n) {
            const auto lo = hn::LoadU(df, xg + c);
            const auto hi = hn::LoadU(df, xg + c + n);
            sum = hn::Add(sum, hn::Add(lo, hi));
            if (w.bits != 4) continue;  // 8-bit codes are in element order: x is used as is
#if HWY_TARGET == HWY_SCALAR
            hn::StoreU(lo, df, dst + c);  // one lane: even, odd is element order
            hn::StoreU(hi, df, dst + c + n);
#else
            // Even elements meet the low nibbles, odd ones the high nibbles.
            hn::StoreU(hn::ConcatEven(df, hi, lo), df, dst + c);
            hn::StoreU(hn::ConcatOdd(df, hi, lo), df, dst + c + n);
#endif
        }
        group_sum[i] = hn::GetLane(hn::SumOfLanes(df, sum));
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model::cpu {

HWY_EXPORT(GemvRowsGrouped);
HWY_EXPORT(PrepareGroupedActivations);
HWY_EXPORT(HasGroupedTokenTiles);

bool grouped_token_tiles_available() { return HWY_DYNAMIC_DISPATCH(HasGroupedTokenTiles)(); }

bool grouped_kernel_supports(const WeightMatrix& w) {
    return w.quantized() && (w.bits == 4 || w.bits == 8) && w.group_size % 32 == 0;
}

void prepare_grouped_activations(const WeightMatrix& w, const float* x, std::int64_t begin,
                                 std::int64_t end, float* xp, float* group_sum) {
    HWY_DYNAMIC_DISPATCH(PrepareGroupedActivations)(w, x, begin, end, xp, group_sum);
}

void gemv_rows_grouped(const WeightMatrix& w, const GroupedActivations& xa, std::int64_t n,
                       std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                       float* y, std::int64_t ldy) {
    HWY_DYNAMIC_DISPATCH(GemvRowsGrouped)(w, xa, n, row_begin, row_end, bias, y, ldy);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
