// Decode GEMV for MLX affine weights with activations quantized to int16 (Highway, one
// instantiation per target).
//
// Why: with f32 activations every code must be widened to i32, converted to f32 and turned
// into scale*q + bias before its FMA (about 6 instructions per vector), which caps 4-bit
// decode at ~45% of memory bandwidth on a 16-core Xeon. Here each group of x is quantized once
// per matmul to int16 (step = max|x_g| / 32767) and a row's group is
// scale * step * Σ q·xq + bias * Σ x, where Σ q·xq is exact in int32 (|q| < 256, |xq| <= 32767,
// 128 terms < 2^31) via pairwise multiply-add (pmaddwd / vpdpwssd-class instructions). Codes
// are only widened u8 -> i16; 4-bit codes are split into nibbles in registers and x is stored
// in the matching even/odd order, so no staging is needed.
//
// Error: |x - xq*step| <= step/2, so a dot product moves by at most
// Σ_g scale_g * step_g/2 * Σ_{c in g} q_c — about 1.5e-5 * max|x| * Σ|w|, far below the bf16
// rounding of the weights themselves. tests/unit/cpu checks exactly that bound.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // cpu_has_avx512_vnni
#include "model/cpu/weight_decode.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu/matmul_int16.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "model/cpu/decode-inl.hpp"
#if HWY_TARGET == HWY_AVX3
#include <immintrin.h>
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Two vector shapes: the full width where it fits the format, else at most 16 int16 lanes.
// A 4-bit chunk of 2 * lanes elements must lie inside one group (groups may be 32 wide), and
// staged formats come in 32-element blocks, so the full width (32 lanes on AVX-512) is used
// only when both hold; AVX2/NEON have 16/8 lanes and always use their full width.
using D16Narrow = hn::CappedTag<std::int16_t, 16>;
using D16Wide = hn::CappedTag<std::int16_t, 32>;

HWY_INLINE bool use_wide(const WeightMatrix& w) {
    const auto n = static_cast<std::int64_t>(hn::Lanes(D16Wide()));
    if (n <= 16) return false;
    return w.bits == 4 ? w.group_size % (2 * n) == 0 : 32 % n == 0;
}

// Elements per step of the kernel: one staged block, or the nibbles of one vector of bytes.
template <class D16>
HWY_INLINE std::int64_t block_elems(int bits) {
    const auto n = static_cast<std::int64_t>(hn::Lanes(D16()));
    return bits == 4 ? std::max<std::int64_t>(32, 2 * n) : 32;
}

// Where block-local element e (0..block_elems-1) of a 4-bit row sits in the activation layout: a
// chunk of 2*n16 elements comes from n16 bytes; their low nibbles (even elements) are multiplied
// with the first n16 slots and the high nibbles (odd elements) with the next n16.
HWY_INLINE std::int64_t nibble_slot(std::int64_t e, std::int64_t n16) {
    const std::int64_t chunk = e / (2 * n16);
    const std::int64_t k = e % (2 * n16);
    return chunk * 2 * n16 + (k % 2) * n16 + k / 2;
}

template <class D16>
void quantize_activations(const WeightMatrix& w, const float* x, std::int64_t begin,
                          std::int64_t end, std::int16_t* xq, float* step, float* sum) {
    const D16 d16;
    const std::int64_t block = block_elems<D16>(w.bits);
    const auto n16 = static_cast<std::int64_t>(hn::Lanes(d16));
    const std::int64_t group = w.group_size;
    for (std::int64_t i = begin; i < end; ++i) {
        // Group g of token t; x and xq are [n, cols], so group i starts at element i * group.
        const float* xg = x + i * group;
        float max_abs = 0.0f, s = 0.0f;
        for (std::int64_t e = 0; e < group; ++e) {
            max_abs = std::max(max_abs, std::fabs(xg[e]));
            s += xg[e];
        }
        const float inv = max_abs > 0.0f ? 32767.0f / max_abs : 0.0f;
        step[i] = max_abs / 32767.0f;
        sum[i] = s;
        std::int16_t* dst = xq + i * group;
        for (std::int64_t e = 0; e < group; ++e) {
            // |xg[e] * inv| <= 32767 (up to one rounding), so the rounded value fits int16.
            const float v = std::min(std::fabs(xg[e] * inv), 32767.0f);
            const auto q = static_cast<std::int16_t>(static_cast<std::int32_t>(v + 0.5f));
            const std::int64_t slot = w.bits == 4 ? e - e % block + nibble_slot(e % block, n16) : e;
            dst[slot] = xg[e] < 0.0f ? static_cast<std::int16_t>(-q) : q;
        }
    }
}

// Integer accumulators (two per token, as ReorderWidenMulAccumulate may use both) and f32
// accumulators of up to 4 tokens; named variables rather than arrays (see matmul.cpp).
template <class D16, int T>
struct IntAcc {
    using D32 = hn::Repartition<std::int32_t, D16>;
    using DF32 = hn::Repartition<float, D16>;
    hn::Vec<D32> p0, q0, p1, q1, p2, q2, p3, q3;
    hn::Vec<DF32> f0, f1, f2, f3;
    float b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    IntAcc() {
        const D32 d32;
        const DF32 df;
        p0 = q0 = p1 = q1 = p2 = q2 = p3 = q3 = hn::Zero(d32);
        f0 = f1 = f2 = f3 = hn::Zero(df);
    }
    HWY_INLINE void mul(hn::Vec<D16> codes, const std::int16_t* xq, std::int64_t ldx) {
        const D16 d16;
        const D32 d32;
        p0 = hn::ReorderWidenMulAccumulate(d32, codes, hn::LoadU(d16, xq), p0, q0);
        if constexpr (T > 1) {
            p1 = hn::ReorderWidenMulAccumulate(d32, codes, hn::LoadU(d16, xq + ldx), p1, q1);
        }
        if constexpr (T > 2) {
            p2 = hn::ReorderWidenMulAccumulate(d32, codes, hn::LoadU(d16, xq + 2 * ldx), p2, q2);
        }
        if constexpr (T > 3) {
            p3 = hn::ReorderWidenMulAccumulate(d32, codes, hn::LoadU(d16, xq + 3 * ldx), p3, q3);
        }
    }
    // Folds the group's integer sums into the f32 accumulators and restarts them.
    HWY_INLINE void end_group(float scale, float bias, const float* step, const float* sum,
                              std::int64_t n_groups) {
        const D32 d32;
        const DF32 df;
        f0 = hn::MulAdd(hn::ConvertTo(df, hn::Add(p0, q0)), hn::Set(df, scale * step[0]), f0);
        b0 += bias * sum[0];
        p0 = q0 = hn::Zero(d32);
        if constexpr (T > 1) {
            f1 = hn::MulAdd(hn::ConvertTo(df, hn::Add(p1, q1)), hn::Set(df, scale * step[n_groups]),
                            f1);
            b1 += bias * sum[n_groups];
            p1 = q1 = hn::Zero(d32);
        }
        if constexpr (T > 2) {
            f2 = hn::MulAdd(hn::ConvertTo(df, hn::Add(p2, q2)),
                            hn::Set(df, scale * step[2 * n_groups]), f2);
            b2 += bias * sum[2 * n_groups];
            p2 = q2 = hn::Zero(d32);
        }
        if constexpr (T > 3) {
            f3 = hn::MulAdd(hn::ConvertTo(df, hn::Add(p3, q3)),
                            hn::Set(df, scale * step[3 * n_groups]), f3);
            b3 += bias * sum[3 * n_groups];
            p3 = q3 = hn::Zero(d32);
        }
    }
    HWY_INLINE void reduce(float* out) const {
        const DF32 df;
        out[0] = hn::GetLane(hn::SumOfLanes(df, f0)) + b0;
        if constexpr (T > 1) out[1] = hn::GetLane(hn::SumOfLanes(df, f1)) + b1;
        if constexpr (T > 2) out[2] = hn::GetLane(hn::SumOfLanes(df, f2)) + b2;
        if constexpr (T > 3) out[3] = hn::GetLane(hn::SumOfLanes(df, f3)) + b3;
    }
};

// out[t] = row r · x[t] for T tokens whose activations start at token `t0`.
template <class D16, int T>
HWY_INLINE void dot_row_int16(const WeightMatrix& w, std::int64_t r, const Int16Activations& xa,
                              std::int64_t t0, float* out) {
    const D16 d16;
    const hn::Rebind<std::uint8_t, D16> d8;
    const auto n16 = static_cast<std::int64_t>(hn::Lanes(d16));
    const std::int64_t cols = w.cols;
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = cols / group;
    const int bits = w.bits;
    const auto* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes();
    const std::int16_t* xq = xa.xq + t0 * cols;
    const float* step = xa.step + t0 * n_groups;
    const float* sum = xa.sum + t0 * n_groups;
    const auto low_nibble = hn::Set(d16, 0x0F);
    HWY_ALIGN std::uint8_t staged[32];
    const std::int64_t block = block_elems<D16>(bits);
    IntAcc<D16, T> acc;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        for (std::int64_t col = g * group; col < (g + 1) * group; col += block) {
            if (bits == 4) {
                const std::uint8_t* bytes = row + col / 2;
                for (std::int64_t j = 0; j < block; j += 2 * n16) {
                    const auto v = hn::PromoteTo(d16, hn::LoadU(d8, bytes + j / 2));
                    acc.mul(hn::And(v, low_nibble), xq + col + j, cols);
                    acc.mul(hn::ShiftRight<4>(v), xq + col + j + n16, cols);
                }
            } else {
                const std::uint8_t* codes = stage_block(row + col * bits / 8, bits, staged);
                for (std::int64_t j = 0; j < 32; j += n16) {
                    acc.mul(hn::PromoteTo(d16, hn::LoadU(d8, codes + j)), xq + col + j, cols);
                }
            }
        }
        acc.end_group(load_any(w.scale_dtype, w.scales, r * n_groups + g),
                      load_any(w.scale_dtype, w.biases, r * n_groups + g), step + g, sum + g,
                      n_groups);
    }
    acc.reduce(out);
}

// Rows r0 .. r0 + R - 1 against one token, 4- and 8-bit codes: dot_row_int16<D16, 1> for R
// rows at once. One row at a time waits on its multiply-add chain and reloads x for every row;
// here each x vector feeds R rows, and scales and biases are widened a vector at a time.
template <class D16, int R>
HWY_INLINE void dot_rows_int16(const WeightMatrix& w, std::int64_t r0, const Int16Activations& xa,
                               float* out) {
    using D32 = hn::Repartition<std::int32_t, D16>;
    using DF32 = hn::Repartition<float, D16>;
    const D16 d16;
    const D32 d32;
    const DF32 df;
    const hn::Rebind<std::uint8_t, D16> d8;
    const auto n16 = static_cast<std::int64_t>(hn::Lanes(d16));
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = w.cols / group;
    const std::int64_t row_bytes = w.row_bytes();
    const int bits = w.bits;
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const auto low_nibble = hn::Set(d16, 0x0F);
    const std::uint8_t* codes[R];
    hn::Vec<DF32> f[R];
    float bias_sum[R];
    for (int i = 0; i < R; ++i) {
        codes[i] = base + (r0 + i) * row_bytes;
        f[i] = hn::Zero(df);
        bias_sum[i] = 0.0f;
    }
    HWY_ALIGN float scale[R][kGroupChunk];
    HWY_ALIGN float bias[R][kGroupChunk];
    TilePrefetch<R> prefetch(xa.prefetch_bytes, row_bytes, xa.next_tile_prefetch_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, n_groups - g0);
        widen_tile_affine<R>(w, n_groups, r0, g0, count, scale, bias);
        for (int i = 0; i < R; ++i) bias_sum[i] += bias_dot(bias[i], xa.sum + g0, count);
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * group;
            prefetch.ahead_of(codes, c_begin * bits / 8);
            hn::Vec<D32> p[R], q[R];
            for (int i = 0; i < R; ++i) p[i] = q[i] = hn::Zero(d32);
            if (bits == 4) {
                for (std::int64_t c = c_begin; c < c_begin + group; c += 2 * n16) {
                    const auto x_even = hn::LoadU(d16, xa.xq + c);
                    const auto x_odd = hn::LoadU(d16, xa.xq + c + n16);
                    for (int i = 0; i < R; ++i) {
                        const auto v = hn::PromoteTo(d16, hn::LoadU(d8, codes[i] + c / 2));
                        p[i] = hn::ReorderWidenMulAccumulate(d32, hn::And(v, low_nibble), x_even,
                                                             p[i], q[i]);
                        p[i] = hn::ReorderWidenMulAccumulate(d32, hn::ShiftRight<4>(v), x_odd, p[i],
                                                             q[i]);
                    }
                }
            } else {
                for (std::int64_t c = c_begin; c < c_begin + group; c += n16) {
                    const auto xv = hn::LoadU(d16, xa.xq + c);
                    for (int i = 0; i < R; ++i) {
                        const auto v = hn::PromoteTo(d16, hn::LoadU(d8, codes[i] + c));
                        p[i] = hn::ReorderWidenMulAccumulate(d32, v, xv, p[i], q[i]);
                    }
                }
            }
            for (int i = 0; i < R; ++i) {
                // scale · step in f32, as end_group.
                const float s = scale[i][g] * xa.step[g0 + g];
                f[i] = hn::MulAdd(hn::ConvertTo(df, hn::Add(p[i], q[i])), hn::Set(df, s), f[i]);
            }
        }
    }
    for (int i = 0; i < R; ++i) out[i] = hn::GetLane(hn::SumOfLanes(df, f[i])) + bias_sum[i];
}

// One token, 4- or 8-bit rows from row_begin in tiles of kVectorRegisters / 8; returns the
// first row not done.
template <class D16>
HWY_NOINLINE std::int64_t rows_int16(const WeightMatrix& w, const Int16Activations& xa,
                                     std::int64_t row_begin, std::int64_t row_end,
                                     const WeightVector* bias, float* y) {
    constexpr int kRows = kVectorRegisters / 8;
    const bool has_bias = bias != nullptr && bias->valid();
    float out[kRows];
    std::int64_t r = row_begin;
    for (; r + kRows <= row_end; r += kRows) {
        dot_rows_int16<D16, kRows>(w, r, xa, out);
        for (int i = 0; i < kRows; ++i) {
            y[r + i] = out[i] + (has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f);
        }
    }
    return r;
}

template <class D16>
void gemv_rows(const WeightMatrix& w, const Int16Activations& xa, std::int64_t n,
               std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias, float* y,
               std::int64_t ldy) {
    const bool has_bias = bias != nullptr && bias->valid();
    float out[4];
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float b = has_bias ? load_any(bias->dtype, bias->data, r) : 0.0f;
        std::int64_t t = 0;
        for (; t + 4 <= n; t += 4) {
            dot_row_int16<D16, 4>(w, r, xa, t, out);
            for (int i = 0; i < 4; ++i) y[(t + i) * ldy + r] = out[i] + b;
        }
        const std::int64_t left = n - t;
        if (left == 3) dot_row_int16<D16, 3>(w, r, xa, t, out);
        if (left == 2) dot_row_int16<D16, 2>(w, r, xa, t, out);
        if (left == 1) dot_row_int16<D16, 1>(w, r, xa, t, out);
        for (std::int64_t i = 0; i < left; ++i) y[(t + i) * ldy + r] = out[i] + b;
    }
}

#if HWY_TARGET == HWY_AVX3
// AVX-512, 4-bit (groups a multiple of 64) and 8-bit weights in the wide layout. The generic
// quantizer above computes every element's slot with divisions, and the generic tiles take one
// token and a multiply-add plus an add per product pair. Here the quantizer works a chunk of 32
// or 64 elements at a time and the rows go in tiles of 1-4 tokens through vpdpwssd
// (AVX512-VNNI, checked at run time; Highway's AVX3 target has no VNNI): per 64 4-bit codes
// and row, one widening load, an AND, a shift and two dot products, against 13 vector
// instructions in the f32 lookup kernel (matmul_grouped.cpp), which is compute-bound on lent
// 16-vCPU machines; per 32 8-bit codes, a widening load and one dot product. Same numbers as
// the generic path: the same xq, and each group's integer sum is exact; only the f32 sums over
// groups run in another order.

// quantize_activations for the wide layout of 4- and 8-bit weights: xq bit for bit as the
// generic loop (the same f32 operations per element), `sum` in another order.
HWY_INLINE void quantize_wide(const WeightMatrix& w, const float* x, std::int64_t begin,
                              std::int64_t end, std::int16_t* xq, float* step, float* sum) {
    const std::int64_t group = w.group_size;
    const __m512 sign_bit = _mm512_set1_ps(-0.0f);
    // Words 0-31: even elements of a 64-element chunk (meeting the low nibbles), 32-63: odd.
    alignas(64) std::int16_t even_index[32], odd_index[32];
    for (int j = 0; j < 32; ++j) {
        even_index[j] = static_cast<std::int16_t>(2 * j);
        odd_index[j] = static_cast<std::int16_t>(2 * j + 1);
    }
    const __m512i even = _mm512_load_si512(even_index);
    const __m512i odd = _mm512_load_si512(odd_index);
    for (std::int64_t i = begin; i < end; ++i) {
        const float* xg = x + i * group;
        __m512 max_abs = _mm512_setzero_ps();
        __m512 s = _mm512_setzero_ps();
        for (std::int64_t e = 0; e < group; e += 16) {
            const __m512 v = _mm512_loadu_ps(xg + e);
            max_abs = _mm512_max_ps(max_abs, _mm512_andnot_ps(sign_bit, v));
            s = _mm512_add_ps(s, v);
        }
        const float m = _mm512_reduce_max_ps(max_abs);
        const float inv = m > 0.0f ? 32767.0f / m : 0.0f;
        step[i] = m / 32767.0f;
        sum[i] = _mm512_reduce_add_ps(s);
        const __m512 vinv = _mm512_set1_ps(inv);
        const __m512 cap = _mm512_set1_ps(32767.0f);
        const __m512 half = _mm512_set1_ps(0.5f);
        std::int16_t* dst = xq + i * group;
        // 4-bit: chunks of 64 elements, split into even and odd; 8-bit: 32 in element order.
        const std::int64_t chunk = w.bits == 4 ? 64 : 32;
        for (std::int64_t c = 0; c < group; c += chunk) {
            __m256i words[4];
            for (int k = 0; k < chunk / 16; ++k) {
                const __m512 v = _mm512_loadu_ps(xg + c + 16 * k);
                const __m512 a =
                    _mm512_min_ps(_mm512_andnot_ps(sign_bit, _mm512_mul_ps(v, vinv)), cap);
                __m512i q = _mm512_cvttps_epi32(_mm512_add_ps(a, half));
                // Negative x: -q (the generic code's sign rule, zero stays zero).
                const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
                q = _mm512_mask_sub_epi32(q, neg, _mm512_setzero_si512(), q);
                words[k] = _mm512_cvtepi32_epi16(q);
            }
            const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(words[0]), words[1], 1);
            if (w.bits == 8) {
                _mm512_storeu_si512(dst + c, lo);
                continue;
            }
            const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(words[2]), words[3], 1);
            _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(lo, even, hi));
            _mm512_storeu_si512(dst + c + 32, _mm512_permutex2var_epi16(lo, odd, hi));
        }
    }
}

// The AVX3 target's own features plus VNNI: clang replaces, not extends, a region's target
// with a function's, and the region's helpers inline only into a superset.
#define BRIGADE_INT16_VNNI_TARGET __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

// out[i * T + t] = row r0 + i · x[t0 + t] for R rows and T tokens, without the rows' additive
// bias. Each x load feeds R rows and each widened code vector T tokens; a group's integer sums
// restart at zero, so the chains of consecutive groups overlap. GROUP is the group size when
// known at compile time (64, MLX's default), else 0: a group of 64 is one pass of the code loop,
// and as a loop of one trip GCC copied every accumulator between registers on each group.
template <int BITS, int R, int T, int GROUP>
BRIGADE_INT16_VNNI_TARGET HWY_INLINE void dot_tile_vnni(const WeightMatrix& w, std::int64_t r0,
                                                        const Int16Activations& xa, std::int64_t t0,
                                                        float* out) {
    const std::int64_t cols = w.cols;
    const std::int64_t group = GROUP > 0 ? GROUP : w.group_size;
    const std::int64_t n_groups = cols / group;
    const std::int64_t row_bytes = w.row_bytes();
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::int16_t* xq = xa.xq + t0 * cols;
    const float* step = xa.step + t0 * n_groups;
    const float* sum = xa.sum + t0 * n_groups;
    const std::uint8_t* codes[R];
    __m512 f[R][T];
    float bias_sum[R][T];
    for (int i = 0; i < R; ++i) {
        codes[i] = base + (r0 + i) * row_bytes;
        for (int t = 0; t < T; ++t) {
            f[i][t] = _mm512_setzero_ps();
            bias_sum[i][t] = 0.0f;
        }
    }
    const __m512i nibble = _mm512_set1_epi16(0x0F);
    HWY_ALIGN float scale[R][kGroupChunk];
    HWY_ALIGN float bias[R][kGroupChunk];
    TilePrefetch<R> prefetch(xa.prefetch_bytes, row_bytes, xa.next_tile_prefetch_row_bytes);
    // scale · step of each group, row and token, multiplied a vector at a time (the same f32
    // products): per group the epilogue is then a conversion and a multiply-add whose factor is
    // broadcast from memory. A scalar multiply and a register broadcast per group, row and token
    // took as many instructions as the codes of a 64-wide group in Qwen2.5-0.5B's short rows.
    HWY_ALIGN float factor[R * T][kGroupChunk];
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
        const std::int64_t count = std::min(kGroupChunk, n_groups - g0);
        widen_tile_affine<R>(w, n_groups, r0, g0, count, scale, bias);
        for (int i = 0; i < R; ++i) {
            for (int t = 0; t < T; ++t) {
                bias_sum[i][t] += bias_dot(bias[i], sum + t * n_groups + g0, count);
                for (std::int64_t g = 0; g < count; g += 16) {
                    const __mmask16 m =
                        _cvtu32_mask16(count - g >= 16 ? 0xFFFFu : (1u << (count - g)) - 1u);
                    _mm512_mask_storeu_ps(
                        factor[i * T + t] + g, m,
                        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, scale[i] + g),
                                      _mm512_maskz_loadu_ps(m, step + t * n_groups + g0 + g)));
                }
            }
        }
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t c_begin = (g0 + g) * group;
            prefetch.ahead_of(codes, c_begin * BITS / 8);
            __m512i acc[R][T];  // set by the first pass over the group
            if constexpr (BITS == 4) {
                for (std::int64_t c = c_begin; c < c_begin + group; c += 64) {
                    __m512i x_even[T], x_odd[T];
                    for (int t = 0; t < T; ++t) {
                        x_even[t] = _mm512_loadu_si512(xq + t * cols + c);
                        x_odd[t] = _mm512_loadu_si512(xq + t * cols + c + 32);
                    }
                    for (int i = 0; i < R; ++i) {
                        const __m512i v = _mm512_cvtepu8_epi16(
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[i] + c / 2)));
                        const __m512i lo = _mm512_and_si512(v, nibble);
                        const __m512i hi = _mm512_srli_epi16(v, 4);
                        for (int t = 0; t < T; ++t) {
                            // The group's first pass starts its sums with vpmaddwd (the same
                            // products as vpdpwssd onto zero, without a zeroed register).
                            acc[i][t] = c == c_begin
                                            ? _mm512_madd_epi16(lo, x_even[t])
                                            : _mm512_dpwssd_epi32(acc[i][t], lo, x_even[t]);
                            acc[i][t] = _mm512_dpwssd_epi32(acc[i][t], hi, x_odd[t]);
                        }
                    }
                }
            } else {
                static_assert(BITS == 8);
                for (std::int64_t c = c_begin; c < c_begin + group; c += 32) {
                    __m512i xv[T];
                    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_si512(xq + t * cols + c);
                    for (int i = 0; i < R; ++i) {
                        const __m512i v = _mm512_cvtepu8_epi16(
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[i] + c)));
                        for (int t = 0; t < T; ++t) {
                            acc[i][t] = c == c_begin ? _mm512_madd_epi16(v, xv[t])
                                                     : _mm512_dpwssd_epi32(acc[i][t], v, xv[t]);
                        }
                    }
                }
            }
            for (int i = 0; i < R; ++i) {
                for (int t = 0; t < T; ++t) {
                    f[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][t]),
                                              _mm512_set1_ps(factor[i * T + t][g]), f[i][t]);
                }
            }
        }
    }
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) out[i * T + t] = _mm512_reduce_add_ps(f[i][t]) + bias_sum[i][t];
    }
}

// Rows [row_begin, row_end) for all n tokens, in tiles of 4 rows for one token and 2 rows by up
// to 4 tokens otherwise (what fits 32 registers); returns the first row not done.
template <int BITS, int GROUP>
BRIGADE_INT16_VNNI_TARGET HWY_NOINLINE std::int64_t rows_vnni(
    const WeightMatrix& w, const Int16Activations& xa, std::int64_t n, std::int64_t row_begin,
    std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy) {
    const bool has_bias = bias != nullptr && bias->valid();
    const std::int64_t tile_rows = n == 1 ? 4 : 2;
    float out[16];
    std::int64_t r = row_begin;
    for (; r + tile_rows <= row_end; r += tile_rows) {
        for (std::int64_t t0 = 0; t0 < n; t0 += 4) {
            const std::int64_t tokens = std::min<std::int64_t>(4, n - t0);
            // A switch, not with_constant: a lambda would not carry this function's VNNI target.
            switch (n == 1 ? 0 : tokens) {
                case 0:
                    dot_tile_vnni<BITS, 4, 1, GROUP>(w, r, xa, t0, out);
                    break;
                case 1:
                    dot_tile_vnni<BITS, 2, 1, GROUP>(w, r, xa, t0, out);
                    break;
                case 2:
                    dot_tile_vnni<BITS, 2, 2, GROUP>(w, r, xa, t0, out);
                    break;
                case 3:
                    dot_tile_vnni<BITS, 2, 3, GROUP>(w, r, xa, t0, out);
                    break;
                default:
                    dot_tile_vnni<BITS, 2, 4, GROUP>(w, r, xa, t0, out);
                    break;
            }
            for (std::int64_t i = 0; i < tile_rows; ++i) {
                const float b = has_bias ? load_any(bias->dtype, bias->data, r + i) : 0.0f;
                for (std::int64_t t = 0; t < tokens; ++t) {
                    y[(t0 + t) * ldy + r + i] = out[i * tokens + t] + b;
                }
            }
        }
    }
    return r;
}
#undef BRIGADE_INT16_VNNI_TARGET
#endif  // HWY_TARGET == HWY_AVX3

void QuantizeActivationsInt16(const WeightMatrix& w, const float* x, std::int64_t begin,
                              std::int64_t end, std::int16_t* xq, float* step, float* sum) {
#if HWY_TARGET == HWY_AVX3
    if ((w.bits == 4 || w.bits == 8) && use_wide(w)) {
        return quantize_wide(w, x, begin, end, xq, step, sum);
    }
#endif
    if (use_wide(w)) return quantize_activations<D16Wide>(w, x, begin, end, xq, step, sum);
    quantize_activations<D16Narrow>(w, x, begin, end, xq, step, sum);
}

// Whether this target quantizes w's activations with vector code (cheap enough to run on the
// calling thread for a whole row of activations).
bool QuantizeInt16IsVectorized(const WeightMatrix& w) {
#if HWY_TARGET == HWY_AVX3
    return (w.bits == 4 || w.bits == 8) && use_wide(w);
#else
    (void)w;
    return false;
#endif
}

void GemvRowsInt16(const WeightMatrix& w, const Int16Activations& xa, std::int64_t n,
                   std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias, float* y,
                   std::int64_t ldy) {
    const bool tiles = xa.multi_row && (w.bits == 4 || w.bits == 8);
    if (!use_wide(w)) {
        if (tiles && n == 1) row_begin = rows_int16<D16Narrow>(w, xa, row_begin, row_end, bias, y);
        return gemv_rows<D16Narrow>(w, xa, n, row_begin, row_end, bias, y, ldy);
    }
#if HWY_TARGET == HWY_AVX3
    if (tiles && int8_detail::cpu_has_avx512_vnni()) {
        const bool g64 = w.group_size == 64;
        if (w.bits == 4) {
            row_begin = g64 ? rows_vnni<4, 64>(w, xa, n, row_begin, row_end, bias, y, ldy)
                            : rows_vnni<4, 0>(w, xa, n, row_begin, row_end, bias, y, ldy);
        }
        if (w.bits == 8) {
            row_begin = g64 ? rows_vnni<8, 64>(w, xa, n, row_begin, row_end, bias, y, ldy)
                            : rows_vnni<8, 0>(w, xa, n, row_begin, row_end, bias, y, ldy);
        }
    }
#endif
    if (tiles && n == 1) row_begin = rows_int16<D16Wide>(w, xa, row_begin, row_end, bias, y);
    gemv_rows<D16Wide>(w, xa, n, row_begin, row_end, bias, y, ldy);
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model::cpu {

HWY_EXPORT(QuantizeActivationsInt16);
HWY_EXPORT(GemvRowsInt16);
HWY_EXPORT(QuantizeInt16IsVectorized);

bool quantize_int16_is_vectorized(const WeightMatrix& w) {
    return HWY_DYNAMIC_DISPATCH(QuantizeInt16IsVectorized)(w);
}

void quantize_activations_int16(const WeightMatrix& w, const float* x, std::int64_t begin,
                                std::int64_t end, std::int16_t* xq, float* step, float* sum) {
    HWY_DYNAMIC_DISPATCH(QuantizeActivationsInt16)(w, x, begin, end, xq, step, sum);
}

void gemv_rows_int16(const WeightMatrix& w, const Int16Activations& xa, std::int64_t n,
                     std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                     float* y, std::int64_t ldy) {
    HWY_DYNAMIC_DISPATCH(GemvRowsInt16)(w, xa, n, row_begin, row_end, bias, y, ldy);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
