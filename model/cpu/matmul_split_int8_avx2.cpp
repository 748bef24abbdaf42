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

#include "model/cpu/matmul_split_int8_avx2-inl.hpp"

}  // namespace brigade::model::cpu::split_int8::avx2_plain
HWY_POP_ATTRIBUTES

// ---- AVX-VNNI: vpdpbusd -----------------------------------------------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avxvnni")
namespace brigade::model::cpu::split_int8::avx_vnni {
using namespace avx2_detail;

inline __m256i dot_nibbles(__m256i lo, __m256i hi, const std::int8_t* d_lo,
                           const std::int8_t* d_hi) {
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_lo));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_hi));
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, d0), hi, d1);
}

#include "model/cpu/matmul_split_int8_avx2-inl.hpp"

}  // namespace brigade::model::cpu::split_int8::avx_vnni
HWY_POP_ATTRIBUTES

namespace brigade::model::cpu::split_int8 {

HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c")
void split_avx2(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                std::int64_t end, std::int8_t* digits, float* unit, float* sum) {
    avx2_detail::split_groups(plan, w, x, begin, end, digits, unit, sum);
}
HWY_POP_ATTRIBUTES

void gemv_256(bool vnni, const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
              std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
              float* const* ys) {
    if (vnni) return avx_vnni::gemv_tokens(w, xs, count, row_begin, row_end, bias, ys);
    avx2_plain::gemv_tokens(w, xs, count, row_begin, row_end, bias, ys);
}

}  // namespace brigade::model::cpu::split_int8

#endif  // BRIGADE_INT8_X86
