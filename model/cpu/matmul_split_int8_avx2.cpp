// The split-int8 decode GEMV (see matmul_split_int8.cpp for the why, the digits and the layout)
// for CPUs with AVX2 and AVX-VNNI but no AVX-512: Alder Lake and later client cores, the
// laptops and desktops of a home lab. Same digits and sums, 32 code bytes (half a chunk, 64
// elements) a step: the low 32 bytes of each of a chunk's 64-byte digit rows meet them, then
// the high 32. A half-chunk is one group of 64, half a group of 128 or two groups of 32, so
// only groups of 32 need a permute of the factors.
//
// With 16 vector registers the digits are not kept in registers: vpdpbusd reads them from
// memory (L1), 4 loads per row and half-chunk.
//
// Also the AVX2 quantizer: the digits of the AVX-512 one bit for bit (the same f32 operations
// on each element), the f32 group sums in another order.

#include <algorithm>
#include <cstring>

#include "model/cpu/matmul_split_int8.hpp"
#include "model/cpu/tile_prefetch.hpp"
#include "model/cpu/weight_decode.hpp"

#if BRIGADE_INT8_X86

#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>

HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avxvnni")
namespace brigade::model::cpu::split_int8 {
namespace {

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
// dst + k * 128, with the operations of matmul_split_int8.cpp's store_digits.
inline void store_digits(const DigitPlan& plan, __m256 x0, __m256 x1, __m256 inv, __m256 step,
                         std::int8_t* dst) {
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
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k * 128), b);
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

#include "model/cpu/matmul_split_int8_quantize-inl.hpp"

// 8 scales (or biases) from element `index` of an F32/F16/BF16 array.
inline __m256 load_affine8(DType dtype, const void* base, std::int64_t index) {
    if (dtype == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(base) + index);
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(base) + index));
    if (dtype == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256i load32(const std::int8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// A = S0 · 2^7 + S1 for 32 code bytes (their low and high nibbles); `d`:
// the digits at the half-chunk's offset within its chunk (digit k even at d + 128k, odd at
// d + 128k + 64).
inline __m256i half_chunk_sum(__m256i lo, __m256i hi, const std::int8_t* d) {
    const __m256i zero = _mm256_setzero_si256();
    __m256i a = _mm256_dpbusd_avx_epi32(zero, lo, load32(d));
    __m256i b = _mm256_dpbusd_avx_epi32(zero, lo, load32(d + 128));
    a = _mm256_dpbusd_avx_epi32(a, hi, load32(d + 64));
    b = _mm256_dpbusd_avx_epi32(b, hi, load32(d + 192));
    return _mm256_add_epi32(_mm256_slli_epi32(a, kPosition[1] - kPosition[0]), b);
}

// out[i] = row r0 + i · x for R rows, without the rows' additive bias. G32: groups of 32 (two
// per half-chunk: lanes 0-3 and 4-7 take their factors through a permute).
template <int R, bool G32>
HWY_NOINLINE void dot_tile(const Tile& m, std::int64_t r0, float* out) {
    const WeightMatrix& w = m.w;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = w.row_bytes();
    const std::int64_t halves = row_bytes / 32;  // full half-chunks
    const bool tail16 = row_bytes % 32 != 0;     // then 16 bytes more (rows of 32k + 16)
    const __m256i tail_mask = _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0);
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    __m256 f[R];  // each row's sum, the bias terms included
    for (int i = 0; i < R; ++i) f[i] = _mm256_setzero_ps();
    // scale · unit per row and group of the pass, then zeros (a short last half-chunk of
    // groups of 32 picks a factor past the last group for its missing elements).
    alignas(32) float factor[R][kFactorGroups + 8];
    TilePrefetch<R> prefetch(m.xa.prefetch_bytes, row_bytes, m.xa.next_tile_prefetch_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, n_groups - g0);
        for (int i = 0; i < R; ++i) {
            const std::int64_t at = (r0 + i) * n_groups + g0;
            std::int64_t g = 0;
            for (; g + 8 <= count; g += 8) {
                const __m256 scale = load_affine8(w.scale_dtype, w.scales, at + g);
                const __m256 bias = load_affine8(w.scale_dtype, w.biases, at + g);
                _mm256_store_ps(factor[i] + g,
                                _mm256_mul_ps(scale, _mm256_loadu_ps(m.xa.unit + g0 + g)));
                f[i] = _mm256_fmadd_ps(bias, _mm256_loadu_ps(m.xa.sum + g0 + g), f[i]);
            }
            float bias_tail = 0.0f;
            for (; g < count; ++g) {
                factor[i][g] = load_scalar(w.scale_dtype, w.scales, at + g) * m.xa.unit[g0 + g];
                bias_tail += load_scalar(w.scale_dtype, w.biases, at + g) * m.xa.sum[g0 + g];
            }
            f[i] = _mm256_add_ps(f[i], _mm256_setr_ps(bias_tail, 0, 0, 0, 0, 0, 0, 0));
            _mm_storeu_ps(factor[i] + count, _mm_setzero_ps());
        }
        // Half-chunks [h_begin, h_end) of the pass: 64 elements each.
        const std::int64_t h_begin = (g0 << m.group_shift) / 64;
        const std::int64_t h_end =
            std::min(halves + (tail16 ? 1 : 0), (((g0 + count) << m.group_shift) + 63) / 64);
        for (std::int64_t h = h_begin; h < h_end; ++h) {
            const std::int64_t first_group = ((h * 64) >> m.group_shift) - g0;
            const std::int8_t* d =
                m.xa.digits + (h / 2) * kChunkDigitBytes + (h % 2) * 32;  // this half's digits
            prefetch.ahead_of(codes, h * 32);
            for (int i = 0; i < R; ++i) {
                const std::uint8_t* p = codes[i] + h * 32;
                const __m256i v =
                    h < halves ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                               : _mm256_maskload_epi32(reinterpret_cast<const int*>(p), tail_mask);
                const __m256i lo = _mm256_and_si256(v, nibble);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                const float* fac = factor[i] + first_group;
                const __m256 scale = G32 ? _mm256_permutevar8x32_ps(_mm256_loadu_ps(fac), pair)
                                         : _mm256_broadcast_ss(fac);
                f[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(half_chunk_sum(lo, hi, d)), scale, f[i]);
            }
        }
    }
    for (int i = 0; i < R; ++i) out[i] = hsum(f[i]);
}

}  // namespace

void split_avx2(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                std::int64_t end, std::int8_t* digits, float* unit, float* sum) {
    split_groups(plan, w, x, begin, end, digits, unit, sum);
}

void gemv_avx_vnni(const WeightMatrix& w, const SplitInt8Activations& xa, std::int64_t row_begin,
                   std::int64_t row_end, const WeightVector* bias, float* y) {
    const Tile m{w, xa, w.cols / w.group_size, group_shift(w)};
    // The lambdas only call the tiles (no vector code of their own), so the target region need
    // not reach them.
    if (w.group_size == 32) {
        for_each_row_tile(row_begin, row_end, bias, y,
                          [&](std::int64_t r, std::int64_t n, float* out) {
                              n == 4 ? dot_tile<4, true>(m, r, out) : dot_tile<1, true>(m, r, out);
                          });
    } else {
        for_each_row_tile(
            row_begin, row_end, bias, y, [&](std::int64_t r, std::int64_t n, float* out) {
                n == 4 ? dot_tile<4, false>(m, r, out) : dot_tile<1, false>(m, r, out);
            });
    }
}

}  // namespace brigade::model::cpu::split_int8
HWY_POP_ATTRIBUTES

#endif  // BRIGADE_INT8_X86
