// The split-int8 decode GEMV (see matmul_split_int8.cpp for the why, the digits and the layout)
// at 256 bits, for CPUs without AVX-512: with AVX-VNNI (Alder Lake and later client cores) and
// with AVX2 alone (Haswell to Comet Lake, so the Intel Macs of a home lab, and AMD Zen 1-3).
// Same digits and sums, 32 code bytes (half a chunk, 64 elements) a step: the low 32 bytes of
// each of a chunk's 64-byte digit rows meet them, then the high 32. A half-chunk is one group
// of 64, half a group of 128 or two groups of 32, so only groups of 32 need a permute of the
// factors.
//
// With 16 vector registers the digits are not kept in registers: the dot products read them
// from memory (L1), 4 loads per row and half-chunk.
//
// Without VNNI each pair of vpdpbusd (a nibble's codes against one digit's even elements, the
// other nibble's against its odd ones) is two vpmaddubsw, one vpaddw and one vpmaddwd: the
// codes are at most 15 and the digits at most 128 in magnitude, so no i16 pair sum (<= 3840)
// or their sum (<= 7680) saturates, and the i32 sums are vpdpbusd's exactly. Session 20 had
// counted three instructions per vpdpbusd and judged this slower than the f32 kernel; summing
// the two nibbles in i16 first makes it two.
//
// With AVX-VNNI, 8-bit rows too (dot8_tile below; AVX2 alone cannot: a pair of whole-byte codes
// times digits saturates vpmaddubsw's i16). On the lent Xeon held to AVX2 + AVX-VNNI (session
// 31, run 151, paired steps against the f32 kernels): one sequence of Qwen2.5-0.5B and
// Llama-3.2-1B 8-bit 6-9% and 20-21% faster, 2-4 sequences 14-33% and 25-46%.
//
// Also the AVX2 quantizer: the digits of the AVX-512 one bit for bit (the same f32 operations
// on each element), the f32 group sums in another order; for 8-bit rows too.

#include <algorithm>

#include "model/cpu/matmul_split_int8.hpp"
#include "model/cpu/tile_prefetch.hpp"
#include "model/cpu/weight_decode.hpp"

#if BRIGADE_INT8_X86

#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>

// ---- Shared by both kernels, and the quantizer: AVX2 only ---------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c")
namespace brigade::model::cpu::split_int8::avx2_detail {

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The even (or odd) elements of a[0..8) and b[0..8), in order.
inline __m256 deinterleave(__m256 a, __m256 b, bool odd) {
    const __m256 s = odd ? _mm256_shuffle_ps(a, b, 0xDD) : _mm256_shuffle_ps(a, b, 0x88);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), 0xD8));
}

// The plan's digits of 16 activations (x0: the first 8, x1: the next) into 16 bytes each at
// dst + k * digit_stride, with the operations of matmul_split_int8.cpp's store_digits.
inline void store_digits(const DigitPlan& plan, __m256 x0, __m256 x1, __m256 inv, __m256 step,
                         std::int8_t* dst, std::int64_t digit_stride = 128) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256 r0 = x0, r1 = x1;
    for (int k = 0; k < plan.count; ++k) {
        const float finer = static_cast<float>(1 << plan.position[k]);
        const __m256 scale = _mm256_mul_ps(inv, _mm256_set1_ps(finer));
        const __m256 back = _mm256_mul_ps(step, _mm256_set1_ps(1.0f / finer));
        const __m256 v0 = _mm256_round_ps(_mm256_mul_ps(r0, scale), kNearest);
        const __m256 v1 = _mm256_round_ps(_mm256_mul_ps(r1, scale), kNearest);
        r0 = _mm256_fnmadd_ps(v0, back, r0);
        r1 = _mm256_fnmadd_ps(v1, back, r1);
        // Saturating narrowing to 16 int8 in order (packs work within 128-bit halves).
        const __m256i w = _mm256_permute4x64_epi64(
            _mm256_packs_epi32(_mm256_cvtps_epi32(v0), _mm256_cvtps_epi32(v1)), 0xD8);
        const __m128i b =
            _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k * digit_stride), b);
    }
}

inline void group_max_sum(const float* xg, std::int64_t group, float& m, float& s) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 max_abs = _mm256_setzero_ps(), total = _mm256_setzero_ps();
    for (std::int64_t e = 0; e < group; e += 8) {
        const __m256 v = _mm256_loadu_ps(xg + e);
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v));
        total = _mm256_add_ps(total, v);
    }
    m = hmax(max_abs);
    s = hsum(total);
}

inline void store_block(const DigitPlan& plan, const float* xb, float inv, float step,
                        std::int8_t* even, std::int8_t* odd) {
    const __m256 a = _mm256_loadu_ps(xb), b = _mm256_loadu_ps(xb + 8);
    const __m256 c = _mm256_loadu_ps(xb + 16), d = _mm256_loadu_ps(xb + 24);
    const __m256 vinv = _mm256_set1_ps(inv), vstep = _mm256_set1_ps(step);
    store_digits(plan, deinterleave(a, b, false), deinterleave(c, d, false), vinv, vstep, even);
    store_digits(plan, deinterleave(a, b, true), deinterleave(c, d, true), vinv, vstep, odd);
}

inline void store_block8(const float* xb, float inv, float step, std::int8_t* dst) {
    store_digits(kGemvDigits, _mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8), _mm256_set1_ps(inv),
                 _mm256_set1_ps(step), dst, kChunk8Elems);
}

#include "model/cpu/matmul_split_int8_quantize-inl.hpp"

// 8 scales (or biases) from element `index` of an F32/F16/BF16 array.
inline __m256 load_affine8(DType dtype, const void* base, std::int64_t index) {
    if (dtype == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(base) + index);
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(base) + index));
    if (dtype == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The first n (<= 8) floats at p, zeros in the other lanes; nothing past them is read.
inline __m256 load_first(const float* p, std::int64_t n) {
    if (n == 8) return _mm256_loadu_ps(p);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes));
}

// load_affine8 of the first n (<= 8) elements, zeros in the other lanes; nothing past them is
// read.
inline __m256 load_affine_first(DType dtype, const void* base, std::int64_t index, std::int64_t n) {
    if (n == 8) return load_affine8(dtype, base, index);
    alignas(32) unsigned char first[32] = {};
    copy_affine_first(dtype, base, index, n, first);
    return load_affine8(dtype, first, 0);
}

// The start of a pass over groups [g0, g0 + count) of R rows for T tokens: factor[t][i][g] =
// scale · unit of row r0 + i, token t and group g0 + g, then zeros (a short last half-chunk of
// groups of 32 picks a factor past the last group for its missing elements); and each row's
// bias terms, bias · Σx per group, added to f[t][i].
template <int R, int T>
inline void pass_factors(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
                         std::int64_t g0, std::int64_t count,
                         float (&factor)[T][R][kFactorGroups + 8], __m256 (&f)[T][R]) {
    const WeightMatrix& w = m.w;
    for (int i = 0; i < R; ++i) {
        const std::int64_t at = (r0 + i) * m.n_groups + g0;
        for (std::int64_t g = 0; g < count; g += 8) {
            // A last 1-7 groups take zeros in the other lanes (zero factors, zero bias terms):
            // a scalar tail cost Qwen2.5-0.5B's rows of 14 groups a sixth of a tile's work.
            // Both loads stop at the n-th element (the arrays may end there); either side's
            // zeros alone would keep the sums right.
            const std::int64_t n = std::min<std::int64_t>(8, count - g);
            const __m256 scale = load_affine_first(w.scale_dtype, w.scales, at + g, n);
            const __m256 bias = load_affine_first(w.scale_dtype, w.biases, at + g, n);
            for (int t = 0; t < T; ++t) {
                _mm256_store_ps(factor[t][i] + g,
                                _mm256_mul_ps(scale, load_first(xa[t]->unit + g0 + g, n)));
                f[t][i] = _mm256_fmadd_ps(bias, load_first(xa[t]->sum + g0 + g, n), f[t][i]);
            }
        }
        for (int t = 0; t < T; ++t) _mm_storeu_ps(factor[t][i] + count, _mm_setzero_ps());
    }
}

// Whether a tile of R rows and T tokens sums each pass into a local copy of f (the same
// operations in the same order, so the same bits). f's address goes to pass_factors, and GCC
// then stores each sum after every FMA of the pass. The copy keeps them in registers where they
// fit: with 16 sums or more (4 rows x 3-4 tokens) AVX2's 16 registers spill either way, and on
// the lent Xeon held to AVX-VNNI 4 tokens were 1-2% slower with the copy (run 165).
template <int R, int T>
inline constexpr bool kLocalSums = (R * T) <= 8;

}  // namespace brigade::model::cpu::split_int8::avx2_detail
HWY_POP_ATTRIBUTES

// ---- AVX2 alone: vpmaddubsw + vpmaddwd ------------------------------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c")
namespace brigade::model::cpu::split_int8::avx2_plain {
using namespace avx2_detail;

inline __m256i dot_nibbles(__m256i lo, __m256i hi, const std::int8_t* d_lo,
                           const std::int8_t* d_hi) {
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_lo));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_hi));
    const __m256i pairs =
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, d0), _mm256_maddubs_epi16(hi, d1));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

inline __m256i dot_nibbles_onto(__m256i acc, __m256i lo, __m256i hi, const std::int8_t* d_lo,
                                const std::int8_t* d_hi) {
    return _mm256_add_epi32(acc, dot_nibbles(lo, hi, d_lo, d_hi));
}

#include "model/cpu/matmul_split_int8_avx2-inl.hpp"

}  // namespace brigade::model::cpu::split_int8::avx2_plain
HWY_POP_ATTRIBUTES

// ---- AVX-VNNI: vpdpbusd -----------------------------------------------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avxvnni")
namespace brigade::model::cpu::split_int8::avx_vnni {
using namespace avx2_detail;

inline __m256i dot_nibbles_onto(__m256i acc, __m256i lo, __m256i hi, const std::int8_t* d_lo,
                                const std::int8_t* d_hi) {
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_lo));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_hi));
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, lo, d0), hi, d1);
}

inline __m256i dot_nibbles(__m256i lo, __m256i hi, const std::int8_t* d_lo,
                           const std::int8_t* d_hi) {
    return dot_nibbles_onto(_mm256_setzero_si256(), lo, hi, d_lo, d_hi);
}

#include "model/cpu/matmul_split_int8_avx2-inl.hpp"

// 8-bit rows, AVX-VNNI only (without VNNI, vpmaddubsw's i16 pair of two codes up to 255 times
// digits up to 127 would saturate): 32 code bytes a step, each lane's 4 codes against its 4
// elements' digits in element order (split8_groups, the AVX-512 layout). Each digit's dot
// products run in one int32 chain over a whole group (STEPS = 1, 2 or 4 steps: |S0| <=
// 4·4·255·127), then A = S0 · 2^7 + S1 takes one conversion and one FMA per group, not per
// step. A above 2^24 rounds in the conversion, by at most 2^-24 of itself. Each row's codes
// are loaded once for all T tokens; every token's floats are those it gets alone.
template <int R, int T, int STEPS>
HWY_NOINLINE void dot8_tile(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
                            float (*out)[4]) {
    const WeightMatrix& w = m.w;
    const std::int64_t row_bytes = w.row_bytes();  // = cols, a multiple of the group
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    __m256 f[T][R];
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) f[t][i] = _mm256_setzero_ps();
    }
    alignas(32) float factor[T][R][kFactorGroups + 8];  // pass_factors's
    TilePrefetch<R> prefetch(m.xa.prefetch_bytes, row_bytes, m.xa.next_tile_prefetch_row_bytes);
    for (std::int64_t g0 = 0; g0 < m.n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, m.n_groups - g0);
        pass_factors<R, T>(m, xa, r0, g0, count, factor, f);
        __m256 local[T][R];
        __m256(&acc)[T][R] = kLocalSums<R, T> ? local : f;
        if constexpr (kLocalSums<R, T>) {
            for (int t = 0; t < T; ++t) {
                for (int i = 0; i < R; ++i) acc[t][i] = f[t][i];
            }
        }
        for (std::int64_t g = 0; g < count; ++g) {
            const std::int64_t s0 = (g0 + g) * STEPS;  // the group's first step
            for (int k = 0; k < STEPS; ++k) prefetch.ahead_of(codes, (s0 + k) * 32);
            for (int i = 0; i < R; ++i) {
                __m256i v[STEPS];
                for (int k = 0; k < STEPS; ++k) {
                    v[k] = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i*>(codes[i] + (s0 + k) * 32));
                }
                for (int t = 0; t < T; ++t) {
                    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
                    for (int k = 0; k < STEPS; ++k) {
                        // Step s0 + k's digits: chunk (s0 + k) / 2 (64 elements), its low or
                        // high 32.
                        const std::int64_t s = s0 + k;
                        const std::int8_t* d =
                            xa[t]->digits + (s / 2) * kChunk8DigitBytes + (s % 2) * 32;
                        a = _mm256_dpbusd_avx_epi32(
                            a, v[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d)));
                        b = _mm256_dpbusd_avx_epi32(
                            b, v[k],
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + kChunk8Elems)));
                    }
                    const __m256i sum =
                        _mm256_add_epi32(_mm256_slli_epi32(a, kPosition[1] - kPosition[0]), b);
                    acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                                                _mm256_broadcast_ss(factor[t][i] + g), acc[t][i]);
                }
            }
        }
        if constexpr (kLocalSums<R, T>) {
            for (int t = 0; t < T; ++t) {
                for (int i = 0; i < R; ++i) f[t][i] = acc[t][i];
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) out[t][i] = hsum(f[t][i]);
    }
}

template <int T, int STEPS>
void gemv8_rows(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t row_begin,
                std::int64_t row_end, const WeightVector* bias, float* const* y) {
    for_each_row_tile_of_tokens<T>(
        row_begin, row_end, bias, y, [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
            n == 4 ? dot8_tile<4, T, STEPS>(m, xa, r, out) : dot8_tile<1, T, STEPS>(m, xa, r, out);
        });
}

template <int T>
void gemv8_tokens_of(const WeightMatrix& w, const SplitInt8Activations* const* xa,
                     std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                     float* const* y) {
    const Tile m{w, *xa[0], w.cols / w.group_size, group_shift(w)};
    switch (w.group_size) {
        case 32:
            return gemv8_rows<T, 1>(m, xa, row_begin, row_end, bias, y);
        case 64:
            return gemv8_rows<T, 2>(m, xa, row_begin, row_end, bias, y);
        default:
            return gemv8_rows<T, 4>(m, xa, row_begin, row_end, bias, y);
    }
}

// 1-4 (`count`) tokens on 8-bit rows.
inline void gemv8_tokens(const WeightMatrix& w, const SplitInt8Activations* const* xa, int count,
                         std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                         float* const* y) {
    with_token_count(count, [&](auto t) {
        gemv8_tokens_of<decltype(t)::value>(w, xa, row_begin, row_end, bias, y);
    });
}

}  // namespace brigade::model::cpu::split_int8::avx_vnni
HWY_POP_ATTRIBUTES

namespace brigade::model::cpu::split_int8 {

HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c")
void split_avx2(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                std::int64_t end, std::int8_t* digits, float* unit, float* sum) {
    avx2_detail::split_groups(plan, w, x, begin, end, digits, unit, sum);
}

void split8_avx2(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                 std::int8_t* digits, float* unit, float* sum) {
    avx2_detail::split8_groups<avx2_detail::store_block8>(w, x, begin, end, digits, unit, sum);
}
HWY_POP_ATTRIBUTES

void gemv_256(bool vnni, const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
              std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
              float* const* ys) {
    if (w.bits == 8) {
        // split_int8_kernel_supports takes 8-bit rows only with VNNI.
        if (vnni) avx_vnni::gemv8_tokens(w, xs, count, row_begin, row_end, bias, ys);
        return;
    }
    if (vnni) return avx_vnni::gemv_tokens(w, xs, count, row_begin, row_end, bias, ys);
    avx2_plain::gemv_tokens(w, xs, count, row_begin, row_end, bias, ys);
}

}  // namespace brigade::model::cpu::split_int8

#endif  // BRIGADE_INT8_X86
