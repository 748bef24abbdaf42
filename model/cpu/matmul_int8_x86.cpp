// x86 variants of the int8-activation GEMV (see matmul_int8.cpp for the why and the error):
// AVX2, AVX-VNNI and AVX-512 VNNI. One row kernel (matmul_int8_x86-inl.hpp) is compiled three
// times, each inside a region of functions with that instruction set's target attribute, so
// the binary runs anywhere and matmul_int8.cpp picks a variant at run time. They differ only
// in how 32 bytes of codes are multiplied with 32 int8 activations into 8 i32 sums:
//
//   AVX2      vpmaddubsw (u8 x s8 -> pairs summed in i16, saturating) + vpmaddwd (-> i32).
//             4-bit codes (<= 15): pair sums <= 2 * 15 * 127, no saturation. 8-bit codes
//             (<= 255) would saturate, so they are centered, a = q - 128 in [-128, 127], and
//             multiplied as |a| x sign(xq, a) (pair sums <= 2 * 128 * 127 < 32767); the
//             kernel adds 128 * Σxq of the group back, so all variants compute Σ q * xq.
//   AVX-VNNI  vpdpbusd ymm (VEX): u8 x s8, 4 products summed into each i32 lane, no
//             intermediate saturation; the codes are used as they are.
//   AVX-512   the same instruction, EVEX-encoded at 256 bits (AVX512_VNNI + AVX512VL), for
//   VNNI      CPUs without AVX-VNNI (Ice Lake, Cascade Lake, Zen 4). 256-bit vectors keep it
//             the same code as the AVX2 path; decode needs ~4 bytes of codes per cycle per
//             core, which a 256-bit vpdpbusd stream exceeds several times over.
//
// Also the AVX2 activation quantizer, which gives exactly the scalar quantizer's xq.

#include "model/cpu/matmul_int8.hpp"

#if BRIGADE_INT8_X86

#include <cpuid.h>
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES: target regions on GCC and clang
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu/weight_decode.hpp"

namespace brigade::model::cpu::int8_detail {

Regs cpuid(unsigned leaf, unsigned subleaf) {
    Regs r;
    if (static_cast<unsigned>(__get_cpuid_max(0, nullptr)) >= leaf)
        __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
    return r;
}

bool bit(unsigned v, int i) { return ((v >> i) & 1u) != 0; }

bool os_saves(unsigned mask) {
    if (!bit(cpuid(1, 0).ecx, 27)) return false;  // OSXSAVE: xgetbv usable
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & mask) == mask;
}

namespace {

// Each computed once: CPUID is slow (in a virtual machine it traps to the hypervisor), and the
// answers are asked for on every matmul.
bool detect_avx2() {
    const Regs l1 = cpuid(1, 0), l7 = cpuid(7, 0);
    // AVX, FMA, F16C (leaf 1 ECX 28, 12, 29), AVX2 (leaf 7 EBX 5), xmm+ymm state (XCR0 1, 2).
    return bit(l1.ecx, 28) && bit(l1.ecx, 12) && bit(l1.ecx, 29) && bit(l7.ebx, 5) && os_saves(0x6);
}

}  // namespace

bool cpu_has_avx2() {
    static const bool has = detect_avx2();
    return has;
}

bool cpu_has_avx512_vnni() {
    // AVX512F, BW, VL (leaf 7 EBX 16, 30, 31), AVX512_VNNI (ECX 11), opmask and zmm state
    // (XCR0 5-7).
    static const bool has = [] {
        const Regs l7 = cpuid(7, 0);
        return cpu_has_avx2() && bit(l7.ebx, 16) && bit(l7.ebx, 30) && bit(l7.ebx, 31) &&
               bit(l7.ecx, 11) && os_saves(0xE6);
    }();
    return has;
}

bool cpu_has_avx_vnni() {
    // AVX-VNNI: leaf 7 subleaf 1 EAX bit 4 (VEX-encoded vpdpbusd on ymm).
    static const bool has = cpu_has_avx2() && bit(cpuid(7, 1).eax, 4);
    return has;
}

}  // namespace brigade::model::cpu::int8_detail

// ---- AVX2 ---------------------------------------------------------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c")
namespace brigade::model::cpu::int8_detail::avx2 {

struct Q8 {
    __m256i abs_a;  // |q - 128| as u8
    __m256i a;      // q - 128 as s8: its sign goes onto xq
};
inline Q8 prepare_q8(__m256i q) {
    const __m256i a = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
    return {_mm256_abs_epi8(a), a};
}
inline constexpr bool kQ8Centered = true;
inline __m256i dot_q8(__m256i acc, const Q8& q, __m256i x) {
    const __m256i pairs = _mm256_maddubs_epi16(q.abs_a, _mm256_sign_epi8(x, q.a));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
inline __m256i dot_q4(__m256i acc, __m256i lo, __m256i hi, __m256i xlo, __m256i xhi) {
    // Both pair sums are <= 3810 in magnitude, so their i16 sum cannot overflow.
    const __m256i pairs =
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

#include "model/cpu/matmul_int8_x86-inl.hpp"

// |v| rounded half away from zero, clamped to 127, with v's sign: round_to_int8 of
// matmul_int8.cpp in 8 lanes (the same f32 operations, so the same results).
inline __m256i round_to_int8(__m256 v) {
    const __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    // min_ps returns its second operand when the first is NaN: 127, as the scalar code.
    const __m256i q = _mm256_cvttps_epi32(
        _mm256_min_ps(_mm256_add_ps(mag, _mm256_set1_ps(0.5f)), _mm256_set1_ps(127.0f)));
    // sign_epi32 negates where v < 0 (sign bit set, -0.0 included: q is 0 there) and zeroes
    // where v's bits are 0 (+0.0: q is 0 there too).
    return _mm256_sign_epi32(q, _mm256_castps_si256(v));
}

void quantize(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
              std::int8_t* xq, float* step, float* sum, std::int32_t* qsum) {
    const std::int64_t group = w.group_size;
    const std::int64_t cols = w.cols;
    const std::int64_t n_groups = cols / group;
    const std::int64_t row_bytes = cols / 2;  // 4-bit only
    const __m256 sign = _mm256_set1_ps(-0.0f);
    // Bytes [0,4) of each 128-bit lane from dwords 0 and 4, ... : undoes packs' lane split.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // Within each 128-bit lane: even bytes first, then odd ones.
    const __m256i even_odd = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                              0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (std::int64_t i = begin; i < end; ++i) {
        const float* xg = x + i * group;
        __m256 vmax = _mm256_setzero_ps(), vsum = _mm256_setzero_ps();
        for (std::int64_t e = 0; e < group; e += 8) {
            const __m256 v = _mm256_loadu_ps(xg + e);
            vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, v));
            vsum = _mm256_add_ps(vsum, v);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        // max_ps drops NaN operands here; the NaN still reaches y through the sum below.
        const float max_abs = _mm_cvtss_f32(m4);
        const float s = hsum(vsum);
        const float inv = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
        step[i] = std::isfinite(s) ? max_abs / 127.0f : NAN;
        sum[i] = s;
        std::int8_t* dst = xq + (i / n_groups) * cols;
        const std::int64_t c0 = (i % n_groups) * group;
        const __m256 vinv = _mm256_set1_ps(inv);
        __m256i total = _mm256_setzero_si256();
        for (std::int64_t e = 0; e < group; e += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; ++k) {
                q[k] = round_to_int8(_mm256_mul_ps(_mm256_loadu_ps(xg + e + 8 * k), vinv));
                total = _mm256_add_epi32(total, q[k]);
            }
            const __m256i bytes = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
                order);  // elements e .. e + 31 in order
            if (w.bits == 8) {
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c0 + e), bytes);
                continue;
            }
            // Elements c0+e .. +31 are bytes j .. j+15 of the row, inside one chunk.
            const std::int64_t j = (c0 + e) / 2;
            const std::int64_t start = j - j % kInt8ChunkBytes;
            const std::int64_t k = chunk_bytes(start, row_bytes);
            const __m256i split =
                _mm256_permute4x64_epi64(_mm256_shuffle_epi8(bytes, even_odd), 0xD8);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * start + (j - start)),
                             _mm256_castsi256_si128(split));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * start + k + (j - start)),
                             _mm256_extracti128_si256(split, 1));
        }
        __m128i t4 =
            _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4E));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xB1));
        qsum[i] = _mm_cvtsi128_si32(t4);
    }
}

}  // namespace brigade::model::cpu::int8_detail::avx2
HWY_POP_ATTRIBUTES

// ---- vpdpbusd emulated with AVX2, for tests ---------------------------------------------------
// The VNNI variants' kernel (codes used as they are, kQ8Centered false) with vpdpbusd computed
// exactly from AVX2 instructions, so machines without VNNI test that path's layout and
// bookkeeping too; only the instruction itself is then left to VNNI machines.
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c")
namespace brigade::model::cpu::int8_detail::vnni_emulated {

// acc + the sums of 4 adjacent products u8 x s8, exactly (vpdpbusd without saturation).
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
    const __m256i u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00FF));
    const __m256i u_odd = _mm256_srli_epi16(u, 8);
    const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
    const __m256i s_odd = _mm256_srai_epi16(s, 8);
    // i32 lane k: bytes 4k and 4k+2 (even), 4k+1 and 4k+3 (odd).
    return _mm256_add_epi32(
        acc, _mm256_add_epi32(_mm256_madd_epi16(u_even, s_even), _mm256_madd_epi16(u_odd, s_odd)));
}
using Q8 = __m256i;
inline Q8 prepare_q8(__m256i q) { return q; }
inline constexpr bool kQ8Centered = false;
inline __m256i dot_q8(__m256i acc, Q8 q, __m256i x) { return dpbusd(acc, q, x); }
inline __m256i dot_q4(__m256i acc, __m256i lo, __m256i hi, __m256i xlo, __m256i xhi) {
    return dpbusd(dpbusd(acc, lo, xlo), hi, xhi);
}

#include "model/cpu/matmul_int8_x86-inl.hpp"

}  // namespace brigade::model::cpu::int8_detail::vnni_emulated
HWY_POP_ATTRIBUTES

// ---- AVX-VNNI -----------------------------------------------------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avxvnni")
namespace brigade::model::cpu::int8_detail::avx_vnni {

using Q8 = __m256i;
inline Q8 prepare_q8(__m256i q) { return q; }
inline constexpr bool kQ8Centered = false;
inline __m256i dot_q8(__m256i acc, Q8 q, __m256i x) { return _mm256_dpbusd_avx_epi32(acc, q, x); }
inline __m256i dot_q4(__m256i acc, __m256i lo, __m256i hi, __m256i xlo, __m256i xhi) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, lo, xlo), hi, xhi);
}

#include "model/cpu/matmul_int8_x86-inl.hpp"

}  // namespace brigade::model::cpu::int8_detail::avx_vnni
HWY_POP_ATTRIBUTES

// ---- AVX-512 VNNI (256-bit) ---------------------------------------------------------------
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace brigade::model::cpu::int8_detail::avx512_vnni {

using Q8 = __m256i;
inline Q8 prepare_q8(__m256i q) { return q; }
inline constexpr bool kQ8Centered = false;
inline __m256i dot_q8(__m256i acc, Q8 q, __m256i x) { return _mm256_dpbusd_epi32(acc, q, x); }
inline __m256i dot_q4(__m256i acc, __m256i lo, __m256i hi, __m256i xlo, __m256i xhi) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, lo, xlo), hi, xhi);
}

#include "model/cpu/matmul_int8_x86-inl.hpp"

}  // namespace brigade::model::cpu::int8_detail::avx512_vnni
HWY_POP_ATTRIBUTES

namespace brigade::model::cpu::int8_detail {

void quantize_avx2(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                   std::int8_t* xq, float* step, float* sum, std::int32_t* qsum) {
    avx2::quantize(w, x, begin, end, xq, step, sum, qsum);
}

void gemv_rows_avx2(const Int8Rows& m, std::int64_t n, std::int64_t row_begin, std::int64_t row_end,
                    const WeightVector* bias, float* y, std::int64_t ldy) {
    avx2::gemv_rows(m, n, row_begin, row_end, bias, y, ldy);
}

void gemv_rows_vnni_emulated(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                             std::int64_t row_end, const WeightVector* bias, float* y,
                             std::int64_t ldy) {
    vnni_emulated::gemv_rows(m, n, row_begin, row_end, bias, y, ldy);
}

void gemv_rows_avx_vnni(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                        std::int64_t row_end, const WeightVector* bias, float* y,
                        std::int64_t ldy) {
    avx_vnni::gemv_rows(m, n, row_begin, row_end, bias, y, ldy);
}

void gemv_rows_avx512_vnni(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                           std::int64_t row_end, const WeightVector* bias, float* y,
                           std::int64_t ldy) {
    avx512_vnni::gemv_rows(m, n, row_begin, row_end, bias, y, ldy);
}

}  // namespace brigade::model::cpu::int8_detail

#endif  // BRIGADE_INT8_X86
