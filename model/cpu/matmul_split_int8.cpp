// Decode GEMV (one token) for MLX affine 4- and 8-bit weights with each activation split into
// four int8 digits, through AVX-512 VNNI integer dot products: f32-class precision for fewer
// instructions than f32 arithmetic takes.
//
// Why: with f32 activations a 4-bit code costs about 6 vector instructions per 32 codes
// (widen, two table lookups, a shift, two FMAs; matmul_grouped.cpp). On the lent 16-vCPU Xeons
// that, not memory, bounds 4-bit decode at 55-83% of the read bandwidth (bench/RESULTS.md).
// vpdpbusd multiplies 64 unsigned code bytes by 64 signed bytes and sums them by fours into 16
// int32 lanes, two per cycle on Sapphire Rapids (measured, like FMAs). One int8 per activation
// (matmul_int8.cpp) is the cheapest use of it but moves perplexity by 0.5%. Here each
// activation x of weight group g is
//
//     x ≈ step_g · Σ_k d_k · 2^-p_k,   step_g = max|x_g| / 127,   |d0| <= 127,
//
// d0 = round(x / step), each next digit the rounded remainder, 2^(p_k - p_(k-1)) times finer,
// so |d_k| <= 2^(p_k - p_(k-1) - 1). Positions p: 4-bit 0, 6, 12, 17; 8-bit 0, 7, 14, 21. The
// error, half the last digit, is 2^-18 · step (3.0e-8 · max|x_g|) for 4-bit and 2^-22 · step
// for 8-bit, at or below f32's own rounding of a product. (Three digits, 2.4e-7 · max|x_g|,
// kept Hugging Face parity but moved logits by up to 2.8e-5 between a batch and a sequence run
// alone, twice what the engine's consistency tests allow.)
//
// Per 64 bytes of codes and row, with S_k = Σ q·d_k over 4 (8-bit) or 8 (4-bit: low nibbles
// with the even elements, high nibbles with the odd ones) codes per int32 lane:
//   4-bit  A = S0·2^17 + S1·2^11 + S2·2^5 + S3: |S0| <= 8·15·127, so |A| < 2^31 even with
//          every digit at ±127; 8 vpdpbusd, 3 shifts, an add, and per chunk one conversion,
//          one permute of the group factors and one FMA: 18 instructions a row with the
//          nibble split, against about 25 for the f32 lookup kernel.
//   8-bit  |S0| <= 4·255·127 leaves no room for four digits in one int32, so two chains,
//          A = S0·2^7 + S1 and B = S2·2^7 + S3, each converted and multiplied; B's sum is
//          scaled by 2^-14 at the end.
// Each lane's sums go to f32 once and are multiplied by scale · unit of their group (unit: the
// value of A's last place). The bias term uses the exact f32 sums of x, as in
// matmul_grouped.cpp. With 2-4 tokens the f32 kernels decode each code once for all of them
// and are faster, so only one token takes this path.
//
// Layout of the digits, per token: chunks of the elements one 64-byte code load covers (128 of
// a 4-bit row, 64 of an 8-bit row; the last chunk zero-padded); per chunk digit 0 to 3 in turn,
// each 64 bytes in element order (8-bit) or 128 bytes (4-bit: the 64 even elements, then the 64
// odd ones).

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86, cpu_has_avx512_vnni
#include "model/cpu/tile_prefetch.hpp"
#include "model/cpu/weight_decode.hpp"

#if BRIGADE_INT8_X86
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>
#endif

namespace brigade::model::cpu {
namespace {

constexpr int kDigits = 4;
// Where digit k sits below d0, in bits (x ≈ step · Σ_k d_k · 2^-position[k], step = max|x_g|/127).
// 4-bit: one int32 chain holds all four (see the file comment); 8-bit: two chains of two.
constexpr int kPosition4[kDigits] = {0, 6, 12, 17};
constexpr int kPosition8[kDigits] = {0, 7, 14, 21};
// The value of one unit of `unit` in steps: 2^-17 (4-bit, d3's weight) or 2^-7 (8-bit, d1's).
constexpr float kUnitInSteps4 = 1.0f / (1 << 17);
constexpr float kUnitInSteps8 = 1.0f / (1 << 7);
constexpr std::int64_t kChunkBytes = 64;  // code bytes per load
// Groups whose scales are widened (and factors computed) per pass over a row tile.
constexpr std::int64_t kFactorGroups = 64;

std::int64_t chunk_elems(int bits) { return kChunkBytes * 8 / bits; }
std::int64_t chunk_digit_bytes(int bits) { return kDigits * chunk_elems(bits); }
std::int64_t n_chunks(const WeightMatrix& w) {
    return (w.cols + chunk_elems(w.bits) - 1) / chunk_elems(w.bits);
}

}  // namespace

std::int64_t split_int8_token_bytes(const WeightMatrix& w) {
    return n_chunks(w) * chunk_digit_bytes(w.bits);
}

#if BRIGADE_INT8_X86

HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace split_int8 {

// 16 scales (or biases) from element `index` of an F32/F16/BF16 array, `mask` lanes loaded,
// the rest zero.
inline __m512 load_affine(DType dtype, const void* base, std::int64_t index, __mmask16 mask) {
    if (dtype == DType::kF32)
        return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + index);
    const auto* p = static_cast<const std::uint16_t*>(base) + index;
    const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
    if (dtype == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __mmask16 first_lanes(std::int64_t n) {
    return _cvtu32_mask16(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

// The four digits of 16 activations into 16 bytes each at dst + k * stride; `step` is the
// value of one d0, `inv` its inverse, `position` where each digit sits below d0.
inline void store_digits(__m512 x, __m512 inv, __m512 step, const int* position, std::int8_t* dst,
                         std::int64_t stride) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512 r = x;  // what the digits so far leave
    for (int k = 0; k < kDigits; ++k) {
        const float finer = static_cast<float>(1 << position[k]);  // exact powers of two
        const __m512 v = _mm512_roundscale_ps(
            _mm512_mul_ps(r, _mm512_mul_ps(inv, _mm512_set1_ps(finer))), kNearest);
        // r - v·step/finer with one rounding: v·step/finer is within half a digit of r, so the
        // difference is nearly exact.
        r = _mm512_fnmadd_ps(v, _mm512_mul_ps(step, _mm512_set1_ps(1.0f / finer)), r);
        // Saturating narrowing: the digits are within ±127 (±2^(gap-1) past the first) by
        // construction; saturation only keeps a NaN or inf activation from wrapping.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k * stride),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
    }
}

void split(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
           std::int8_t* digits, float* unit, float* sum) {
    const std::int64_t group = w.group_size, cols = w.cols;
    const std::int64_t n_groups = cols / group;
    const std::int64_t elems = chunk_elems(w.bits);
    const std::int64_t token_bytes = split_int8_token_bytes(w);
    const std::int64_t digit_stride = w.bits == 4 ? 128 : 64;  // bytes between a chunk's digits
    // Even and odd elements of 32 (two vectors), for the 4-bit layout.
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t t = i / n_groups, g = i % n_groups;
        const float* xg = x + i * group;  // x is [n, cols]: group i starts at i * group
        __m512 max_abs = _mm512_setzero_ps(), s = _mm512_setzero_ps();
        for (std::int64_t e = 0; e < group; e += 16) {
            const __m512 v = _mm512_loadu_ps(xg + e);
            max_abs = _mm512_max_ps(max_abs, _mm512_abs_ps(v));
            s = _mm512_add_ps(s, v);
        }
        const float m = _mm512_reduce_max_ps(max_abs);
        const float step = m / 127.0f;  // value of one d0
        unit[i] = step * (w.bits == 4 ? kUnitInSteps4 : kUnitInSteps8);
        sum[i] = _mm512_reduce_add_ps(s);
        const __m512 vinv = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
        const __m512 vstep = _mm512_set1_ps(step);
        const int* position = w.bits == 4 ? kPosition4 : kPosition8;
        std::int8_t* token = digits + t * token_bytes;
        for (std::int64_t e = 0; e < group; e += 32) {
            const std::int64_t element = g * group + e;  // in the row
            const std::int64_t chunk = element / elems, in_chunk = element % elems;
            std::int8_t* base = token + chunk * chunk_digit_bytes(w.bits);
            const __m512 a = _mm512_loadu_ps(xg + e), b = _mm512_loadu_ps(xg + e + 16);
            if (w.bits == 4) {
                // 32 elements are 16 bytes of codes: even ones meet the low nibbles.
                const std::int64_t byte = in_chunk / 2;
                store_digits(_mm512_permutex2var_ps(a, even, b), vinv, vstep, position, base + byte,
                             digit_stride);
                store_digits(_mm512_permutex2var_ps(a, odd, b), vinv, vstep, position,
                             base + 64 + byte, digit_stride);
            } else {
                store_digits(a, vinv, vstep, position, base + in_chunk, digit_stride);
                store_digits(b, vinv, vstep, position, base + in_chunk + 16, digit_stride);
            }
        }
        // The last group of a token zeroes the padding of its chunk, so that padded codes
        // (loaded as zero) meet zero digits.
        const std::int64_t used = cols % elems;
        if (g == n_groups - 1 && used != 0) {
            std::int8_t* base = token + (n_chunks(w) - 1) * chunk_digit_bytes(w.bits);
            for (int k = 0; k < kDigits; ++k) {
                if (w.bits == 4) {
                    std::memset(base + k * 128 + used / 2, 0,
                                static_cast<std::size_t>(64 - used / 2));
                    std::memset(base + k * 128 + 64 + used / 2, 0,
                                static_cast<std::size_t>(64 - used / 2));
                } else {
                    std::memset(base + k * 64 + used, 0, static_cast<std::size_t>(64 - used));
                }
            }
        }
    }
}

// What a row tile needs of one matmul.
struct Tile {
    const WeightMatrix& w;
    const SplitInt8Activations& xa;
    std::int64_t n_groups;
    int group_shift;  // log2(group size)
};

// A chunk's digits: kDigits vectors (8-bit) or 2 * kDigits (4-bit: even elements, odd ones).
template <int BITS>
struct ChunkDigits {
    static constexpr int kVectors = BITS == 4 ? 2 * kDigits : kDigits;
    __m512i v[kVectors];
    HWY_INLINE explicit ChunkDigits(const std::int8_t* d) {
        for (int k = 0; k < kVectors; ++k) v[k] = _mm512_loadu_si512(d + 64 * k);
    }
};

// 4-bit: A = Σ_k (Σ q·d_k) · 2^(17 - position[k]), from two chains of two digits (half the
// latency of one chain of four) joined by a shift and an add; B unused. 8-bit:
// A = ((Σ q·d0) << 7) + Σ q·d1 and B = ((Σ q·d2) << 7) + Σ q·d3. For one chunk of 64 code bytes
// (4-bit: its low and high nibbles).
template <int BITS>
HWY_INLINE void chunk_sums(__m512i lo, __m512i hi, const ChunkDigits<BITS>& d, __m512i& a,
                           __m512i& b) {
    const __m512i zero = _mm512_setzero_si512();
    if constexpr (BITS == 4) {
        a = _mm512_dpbusd_epi32(zero, lo, d.v[0]);
        b = _mm512_dpbusd_epi32(zero, lo, d.v[4]);
        a = _mm512_dpbusd_epi32(a, hi, d.v[1]);
        b = _mm512_dpbusd_epi32(b, hi, d.v[5]);
        a = _mm512_slli_epi32(a, kPosition4[1] - kPosition4[0]);
        b = _mm512_slli_epi32(b, kPosition4[3] - kPosition4[2]);
        a = _mm512_dpbusd_epi32(a, lo, d.v[2]);
        b = _mm512_dpbusd_epi32(b, lo, d.v[6]);
        a = _mm512_dpbusd_epi32(a, hi, d.v[3]);
        b = _mm512_dpbusd_epi32(b, hi, d.v[7]);
        a = _mm512_add_epi32(_mm512_slli_epi32(a, kPosition4[3] - kPosition4[1]), b);
    } else {
        (void)hi;
        a = _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, lo, d.v[0]), 7);
        b = _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, lo, d.v[2]), 7);
        a = _mm512_dpbusd_epi32(a, lo, d.v[1]);
        b = _mm512_dpbusd_epi32(b, lo, d.v[3]);
    }
}

// f[i] sums scale·u·A of row i; fine[i] (8-bit) scale·u·B, in 2^-14 of f's units.
template <int R>
struct TileSums {
    __m512 f[R], fine[R];
};

// One chunk of 64 code bytes of every row of the tile; `mask` selects the bytes the rows have
// (all but in a short last chunk, whose missing codes load as zero: a masked load costs what a
// plain one does, and one code path keeps the sums in registers). `factor[i]`: scale·u of row
// i for the lanes' first group.
template <int BITS, int R, bool SHARED>
HWY_INLINE void chunk_step(const std::uint8_t* const* codes, std::int64_t at, __mmask64 mask,
                           const ChunkDigits<BITS>& d, const float* const* factor,
                           __m512i lane_group, TileSums<R>& sums) {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int i = 0; i < R; ++i) {
        const __m512i v = _mm512_maskz_loadu_epi8(mask, codes[i] + at);
        __m512i lo = v, hi = v;
        if constexpr (BITS == 4) {
            lo = _mm512_and_si512(v, nibble);
            hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        }
        __m512i a, b;
        chunk_sums<BITS>(lo, hi, d, a, b);
        const __m512 scale = SHARED ? _mm512_permutexvar_ps(lane_group, _mm512_loadu_ps(factor[i]))
                                    : _mm512_set1_ps(*factor[i]);
        sums.f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), scale, sums.f[i]);
        if constexpr (BITS == 8) {
            sums.fine[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(b), scale, sums.fine[i]);
        }
    }
}

// out[i] = row r0 + i · x for R rows, without the rows' additive bias. The rows share each
// chunk's digits (loaded once). SHARED: more than one group per chunk (each lane takes its
// group's factor through a permute); otherwise one factor, broadcast, per chunk.
template <int BITS, int R, bool SHARED>
HWY_NOINLINE void dot_tile(const Tile& m, std::int64_t r0, float* out) {
    const WeightMatrix& w = m.w;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = w.row_bytes();
    const std::int64_t elems = chunk_elems(BITS);
    const std::int64_t chunk_bytes = chunk_digit_bytes(BITS);
    const std::int64_t chunks = n_chunks(w);
    const std::int64_t tail_bytes = row_bytes - (chunks - 1) * kChunkBytes;  // 16..64
    // Chunks before `full`: 64 bytes of codes; a shorter last one takes `tail_mask`.
    const std::int64_t full = tail_bytes == kChunkBytes ? chunks : chunks - 1;
    const __mmask64 tail_mask = _cvtu64_mask64((1ull << (tail_bytes & 63)) - 1);
    const __mmask64 all = _cvtu64_mask64(~0ull);
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    // Lane l covers chunk elements [l, l + 1) * elems / 16; its group within the chunk:
    const int lane_elems_shift = BITS == 4 ? 3 : 2;
    __m512i lane_group = _mm512_setzero_si512();
    if constexpr (SHARED) {
        lane_group = _mm512_srlv_epi32(
            _mm512_slli_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                lane_elems_shift),
            _mm512_set1_epi32(m.group_shift));
    }
    TileSums<R> sums;
    __m512 bias_acc[R];
    for (int i = 0; i < R; ++i) sums.f[i] = sums.fine[i] = bias_acc[i] = _mm512_setzero_ps();
    // scale · u per row and group of the pass, and zeros for up to 3 groups past the last: a
    // padded chunk's permute picks them for its missing elements (whose products are zero, but
    // 0 · NaN would not be). + 16: a permute loads 16 factors and picks from the first 4.
    alignas(64) float factor[R][kFactorGroups + 16];
    TilePrefetch<R> prefetch(m.xa.prefetch_bytes, row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, n_groups - g0);
        for (int i = 0; i < R; ++i) {
            const std::int64_t at = (r0 + i) * n_groups + g0;
            for (std::int64_t g = 0; g < count; g += 16) {
                const __mmask16 mask = first_lanes(count - g);
                const __m512 scale = load_affine(w.scale_dtype, w.scales, at + g, mask);
                const __m512 bias = load_affine(w.scale_dtype, w.biases, at + g, mask);
                const std::int64_t xg = g0 + g;
                _mm512_store_ps(factor[i] + g,
                                _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(mask, m.xa.unit + xg)));
                bias_acc[i] =
                    _mm512_fmadd_ps(bias, _mm512_maskz_loadu_ps(mask, m.xa.sum + xg), bias_acc[i]);
            }
            _mm_storeu_ps(factor[i] + count, _mm_setzero_ps());
        }
        const std::int64_t c_begin = (g0 << m.group_shift) / elems;
        const std::int64_t c_end =
            std::min(chunks, (((g0 + count) << m.group_shift) + elems - 1) / elems);
        for (std::int64_t c = c_begin; c < c_end; ++c) {
            const std::int64_t first_group = ((c * elems) >> m.group_shift) - g0;  // in the pass
            const float* fac[R];
            for (int i = 0; i < R; ++i) fac[i] = factor[i] + first_group;
            prefetch.ahead_of(codes, c * kChunkBytes);
            const ChunkDigits<BITS> d(m.xa.digits + c * chunk_bytes);
            chunk_step<BITS, R, SHARED>(codes, c * kChunkBytes, c < full ? all : tail_mask, d, fac,
                                        lane_group, sums);
        }
    }
    for (int i = 0; i < R; ++i) {
        const __m512 sum = _mm512_fmadd_ps(sums.fine[i], _mm512_set1_ps(1.0f / 16384), sums.f[i]);
        out[i] = _mm512_reduce_add_ps(sum) + _mm512_reduce_add_ps(bias_acc[i]);
    }
}

template <int BITS, bool SHARED>
void rows(const Tile& m, std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
          float* y) {
    const bool has_bias = bias != nullptr && bias->valid();
    float out[4];
    std::int64_t r = row_begin;
    // 4 rows share each chunk's digits (5 registers a row, 8 digit vectors).
    while (r < row_end) {
        const std::int64_t n_rows = row_end - r >= 4 ? 4 : 1;
        if (n_rows == 4) {
            dot_tile<BITS, 4, SHARED>(m, r, out);
        } else {
            dot_tile<BITS, 1, SHARED>(m, r, out);
        }
        for (std::int64_t i = 0; i < n_rows; ++i) {
            y[r + i] = out[i] + (has_bias ? load_scalar(bias->dtype, bias->data, r + i) : 0.0f);
        }
        r += n_rows;
    }
}

void gemv(const WeightMatrix& w, const SplitInt8Activations& xa, std::int64_t row_begin,
          std::int64_t row_end, const WeightVector* bias, float* y) {
    const int shift = w.group_size == 32 ? 5 : (w.group_size == 64 ? 6 : 7);
    const Tile m{w, xa, w.cols / w.group_size, shift};
    // More than one group per 64-byte chunk: 4-bit groups of 32 and 64, 8-bit groups of 32.
    const bool shared = w.group_size < chunk_elems(w.bits);
    if (w.bits == 4) {
        shared ? rows<4, true>(m, row_begin, row_end, bias, y)
               : rows<4, false>(m, row_begin, row_end, bias, y);
    } else {
        shared ? rows<8, true>(m, row_begin, row_end, bias, y)
               : rows<8, false>(m, row_begin, row_end, bias, y);
    }
}

}  // namespace split_int8
HWY_POP_ATTRIBUTES

bool split_int8_kernel_supports(const WeightMatrix& w) {
    const bool format = w.quantized() && (w.bits == 4 || w.bits == 8) &&
                        (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) &&
                        w.cols % w.group_size == 0 &&
                        (w.scale_dtype == DType::kF32 || w.scale_dtype == DType::kF16 ||
                         w.scale_dtype == DType::kBF16);
    return format && int8_detail::cpu_has_avx512_vnni();
}

void split_activations_int8(const WeightMatrix& w, const float* x, std::int64_t begin,
                            std::int64_t end, std::int8_t* digits, float* unit, float* sum) {
    split_int8::split(w, x, begin, end, digits, unit, sum);
}

void gemv_rows_split_int8(const WeightMatrix& w, const SplitInt8Activations& xa,
                          std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                          float* y) {
    split_int8::gemv(w, xa, row_begin, row_end, bias, y);
}

#else  // not x86: no kernel, callers check split_int8_kernel_supports first

bool split_int8_kernel_supports(const WeightMatrix&) { return false; }
void split_activations_int8(const WeightMatrix&, const float*, std::int64_t, std::int64_t,
                            std::int8_t*, float*, float*) {}
void gemv_rows_split_int8(const WeightMatrix&, const SplitInt8Activations&, std::int64_t,
                          std::int64_t, const WeightVector*, float*) {}

#endif  // BRIGADE_INT8_X86

}  // namespace brigade::model::cpu
