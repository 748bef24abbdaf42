// Decode GEMV (one or two tokens) for MLX affine 4-bit weights (and 8-bit ones, below) with each
// activation split into two int8 digits, through AVX-512 VNNI integer dot products: fewer
// instructions than f32 arithmetic takes, at a precision far finer than the weights' own.
//
// Why: with f32 activations a 4-bit code costs about 6 vector instructions per 32 codes
// (widen, two table lookups, a shift, two FMAs; matmul_grouped.cpp). On the lent 16-vCPU Xeons
// that, not memory, bounds 4-bit decode at 55-83% of the read bandwidth (bench/RESULTS.md).
// vpdpbusd multiplies 64 unsigned code bytes by 64 signed bytes and sums them by fours into 16
// int32 lanes, two per cycle on Sapphire Rapids (measured, like FMAs). One int8 per activation
// (matmul_int8.cpp) is the cheapest use of it but moves perplexity by 0.5%. Here each
// activation x of weight group g is
//
//     x ≈ step_g · (d0 + d1·2^-7),   step_g = max|x_g| / 127,
//
// d0 = round(x / step) and d1 the rounded remainder, so |d0| <= 127, |d1| <= 64, and the error,
// half the last digit, is 2^-8 · step (3.1e-5 · max|x_g|).
//
// Why two digits (split_int8::kGemvDigits): until session 27 there were four (positions 0, 6,
// 12, 17; 3.0e-8 · max|x_g|, f32's own rounding of a product), chosen so that a token decoded
// alone matched a batch's f32 kernels within the f32 consistency tolerance. But the weights are
// 4-bit (a code is 1/15 of its group's range), the serving default's f16 KV cache moves the
// logits by up to 1.3e-3 of the largest on the Hugging Face fixtures, and other engines run
// these matmuls with f16/bf16 (MLX, 2^-11 / 2^-8 of each value) or int8 activations
// (llama.cpp). Two digits are 8 to 60 times finer than those; on the fixtures a decoded token's
// logits moved by at most 4.1e-4 of the largest (HfParity.BatchEqualsAlone bounds it at 1e-3),
// and every greedy continuation is still Hugging Face's token for token. The dot products per
// chunk halve: on the lent Xeon, one sequence of Qwen2.5-0.5B and Llama-3.2-1B 4-bit decoded
// ~10-20% faster and two sequences ~30-50% (runs 112-113). The AMX tiles take these two digits
// for a batch of decode steps, and four (kAmxDigits, matmul_amx.cpp) for prompts, whose logits
// are held to Hugging Face's within 1e-4 of the largest; the quantizer takes either plan.
//
// Per 64 bytes of codes (128 elements) and row, with S_k = Σ q·d_k over the 8 codes of an int32
// lane (low nibbles with the even elements, high nibbles with the odd ones):
//
//     A = S0·2^7 + S1,
//
// exact in int32 (|S0| <= 8·15·127): 4 vpdpbusd and a shift (the second digit's chain starts
// from the first's, shifted), then one conversion, one permute of the group factors and one FMA
// per lane; 11 instructions with the nibble split,
// against 18 with four digits and about 25 in the f32 lookup kernel. A's last place is worth
// `unit` = step · 2^-7, so each lane adds A · scale · unit of its group. The bias term uses the
// exact f32 sums of x, as in matmul_grouped.cpp.
//
// 8-bit rows (AVX-512 and AVX-VNNI, dot8_tile): a code is a whole byte, so each lane's 4 codes meet
// their 4 elements' digits in element order (chunks of 64 elements, split8_avx512), and
// |S0| <= 4·255·127 still leaves room for A = S0·2^7 + S1 in one chain: 2 vpdpbusd and a shift
// per 64 code bytes and row. With four digits (session 12, two chains) this was faster
// on short rows only and 8-bit kept the f32 kernel; with two, on the lent Xeon one sequence of
// Qwen2.5-0.5B and Llama-3.2-1B 8-bit decoded 14% and 10% faster (medians of five alternated
// rounds), two sequences 31% and 25% (run 116); on a Zen 4 x1 +0-9%, x2 +10-39%. From cache,
// Qwen's long down_proj rows (4864 bytes) ran 10-13% slower than the f32 kernel, its short ones
// 12-20% faster. With 3 tokens and more the f32 kernels (or AMX tiles) decode each code once for
// all of them. AVX-VNNI (matmul_split_int8_avx2.cpp) takes 8-bit rows 32 code bytes a step;
// AVX2 alone cannot (vpmaddubsw's pairs of whole-byte codes saturate in i16).
//
// Layout of the digits, per token: chunks of 128 elements (one 64-byte load of codes; the last
// chunk zero-padded); per chunk each digit of the plan in turn, each 128 bytes: the 64 even
// elements, then the 64 odd ones.

#include "model/cpu/matmul_split_int8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu/tile_prefetch.hpp"
#include "model/cpu/weight_decode.hpp"

#if BRIGADE_INT8_X86
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>
#endif

namespace brigade::model::cpu {

std::int64_t split_int8_token_bytes(const WeightMatrix& w) {
    return w.bits == 8 ? split_int8::token_bytes8(w)
                       : split_int8::n_chunks(w) * split_int8::kChunkDigitBytes;
}

#if BRIGADE_INT8_X86

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_* vectors to their masked forms, which
// -Wmaybe-uninitialized and -Wuninitialized report at every use (GCC bug 105593, fixed in
// GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace split_int8 {

// 16 scales (or biases) from element `index` of an F32/F16/BF16 array, `mask` lanes loaded,
// the rest zero.
inline __m512 load_affine(DType dtype, const void* base, std::int64_t index, __mmask16 mask) {
    if (dtype == DType::kF32) {
        return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + index);
    }
    const auto* p = static_cast<const std::uint16_t*>(base) + index;
    const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
    if (dtype == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __mmask16 first_lanes(std::int64_t n) {
    return _cvtu32_mask16(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

namespace {

// The plan's digits of 16 activations into 16 bytes each at dst + k * digit_stride; `step` is
// the value of one d0 and `inv` its inverse.
inline void store_digits(const DigitPlan& plan, __m512 x, __m512 inv, __m512 step, std::int8_t* dst,
                         std::int64_t digit_stride = 128) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512 r = x;  // what the digits so far leave
    for (int k = 0; k < plan.count; ++k) {
        const float finer = static_cast<float>(1 << plan.position[k]);  // exact powers of two
        const __m512 v = _mm512_roundscale_ps(
            _mm512_mul_ps(r, _mm512_mul_ps(inv, _mm512_set1_ps(finer))), kNearest);
        // r - v·step/finer with one rounding: v·step/finer is within half a digit of r, so the
        // difference is nearly exact.
        r = _mm512_fnmadd_ps(v, _mm512_mul_ps(step, _mm512_set1_ps(1.0f / finer)), r);
        // Saturating narrowing: the digits are in range by construction; saturation only keeps
        // a NaN or inf activation from wrapping.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k * digit_stride),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
    }
}

inline void group_max_sum(const float* xg, std::int64_t group, float& m, float& s) {
    __m512 max_abs = _mm512_setzero_ps(), total = _mm512_setzero_ps();
    for (std::int64_t e = 0; e < group; e += 16) {
        const __m512 v = _mm512_loadu_ps(xg + e);
        max_abs = _mm512_max_ps(max_abs, _mm512_abs_ps(v));
        total = _mm512_add_ps(total, v);
    }
    m = _mm512_reduce_max_ps(max_abs);
    s = _mm512_reduce_add_ps(total);
}

inline void store_block(const DigitPlan& plan, const float* xb, float inv, float step,
                        std::int8_t* even, std::int8_t* odd) {
    // Even and odd elements of 32 (two vectors).
    const __m512i even_index =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_index =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
    const __m512 vinv = _mm512_set1_ps(inv), vstep = _mm512_set1_ps(step);
    store_digits(plan, _mm512_permutex2var_ps(a, even_index, b), vinv, vstep, even);
    store_digits(plan, _mm512_permutex2var_ps(a, odd_index, b), vinv, vstep, odd);
}

inline void store_block8(const float* xb, float inv, float step, std::int8_t* dst) {
    store_digits(kGemvDigits, _mm512_loadu_ps(xb), _mm512_set1_ps(inv), _mm512_set1_ps(step), dst,
                 kChunk8Elems);
}

#include "model/cpu/matmul_split_int8_quantize-inl.hpp"

}  // namespace

void split_avx512(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                  std::int64_t end, std::int8_t* digits, float* unit, float* sum) {
    split_groups(plan, w, x, begin, end, digits, unit, sum);
}

void split8_avx512(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                   std::int8_t* digits, float* unit, float* sum) {
    split8_groups<store_block8>(w, x, begin, end, digits, unit, sum);
}

// A chunk's digits: kDigits x (even elements, odd ones).
struct ChunkDigits {
    __m512i v[2 * kDigits];
    HWY_INLINE explicit ChunkDigits(const std::int8_t* d) {
        for (int k = 0; k < 2 * kDigits; ++k) v[k] = _mm512_loadu_si512(d + 64 * k);
    }
};

// A = S0 · 2^7 + S1 for one chunk of 64 code bytes (its low and high nibbles): the first digit's
// chain, shifted, is where the second digit's chain starts (the same integers as two chains
// joined by a shift and an add, one instruction fewer).
HWY_INLINE __m512i chunk_sum(__m512i lo, __m512i hi, const ChunkDigits& d) {
    __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, d.v[0]);
    a = _mm512_dpbusd_epi32(a, hi, d.v[1]);
    __m512i sum =
        _mm512_dpbusd_epi32(_mm512_slli_epi32(a, kPosition[1] - kPosition[0]), lo, d.v[2]);
    return _mm512_dpbusd_epi32(sum, hi, d.v[3]);
}

// The start of a pass over groups [g0, g0 + count) of R rows for T tokens: factor[t][i][g] =
// scale · unit of row r0 + i, token t and group g0 + g, then zeros for 4 groups past the last (a
// partial last chunk's lanes pick them; their products are zero, but 0 · NaN would not be); and
// each row's bias terms, bias · Σx per group, added to f[t][i].
template <int R, int T>
HWY_INLINE void pass_factors(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
                             std::int64_t g0, std::int64_t count,
                             float (&factor)[T][R][kFactorGroups + 16], __m512 (&f)[T][R]) {
    const WeightMatrix& w = m.w;
    for (int i = 0; i < R; ++i) {
        const std::int64_t at = (r0 + i) * m.n_groups + g0;
        for (std::int64_t g = 0; g < count; g += 16) {
            const __mmask16 mask = first_lanes(count - g);
            const __m512 scale = load_affine(w.scale_dtype, w.scales, at + g, mask);
            const __m512 bias = load_affine(w.scale_dtype, w.biases, at + g, mask);
            const std::int64_t xg = g0 + g;
            for (int t = 0; t < T; ++t) {
                _mm512_store_ps(
                    factor[t][i] + g,
                    _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(mask, xa[t]->unit + xg)));
                f[t][i] =
                    _mm512_fmadd_ps(bias, _mm512_maskz_loadu_ps(mask, xa[t]->sum + xg), f[t][i]);
            }
        }
        for (int t = 0; t < T; ++t) _mm_storeu_ps(factor[t][i] + count, _mm_setzero_ps());
    }
}

// out[t][i] = row r0 + i · x_t for R rows and T tokens (xa[t]: token t's digits), without the
// rows' additive bias. The rows share each chunk's digits; the tokens share each chunk's codes,
// unpacked once. SHARED: groups of 32 or 64, more than one per chunk (each lane takes its
// group's factor through a permute); otherwise one factor, broadcast, per chunk. Each token's
// floats are those of T = 1.
template <int R, bool SHARED, int T>
HWY_NOINLINE void dot_tile(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
                           float (*out)[4]) {
    const WeightMatrix& w = m.w;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = w.row_bytes();
    const std::int64_t chunks = n_chunks(w);
    const std::int64_t tail_bytes = row_bytes - (chunks - 1) * kChunkBytes;  // 16..64
    // Chunks before `full`: 64 bytes of codes; a shorter last one takes `tail_mask`.
    const std::int64_t full = tail_bytes == kChunkBytes ? chunks : chunks - 1;
    const __mmask64 tail_mask = _cvtu64_mask64((1ull << (tail_bytes & 63)) - 1);
    const __mmask64 all = _cvtu64_mask64(~0ull);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    // Lane l covers chunk elements [8l, 8l + 8); its group within the chunk:
    __m512i lane_group = _mm512_setzero_si512();
    if constexpr (SHARED) {
        lane_group = _mm512_srlv_epi32(
            _mm512_slli_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 3),
            _mm512_set1_epi32(m.group_shift));
    }
    // Each row's sum, the bias terms included (one reduction at the end; Qwen2.5-0.5B's rows of
    // 7 chunks spent a sixth of their time on a second one).
    __m512 f[T][R];
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) f[t][i] = _mm512_setzero_ps();
    }
    // pass_factors's; + 16: a permute loads 16 factors and picks from the first 4.
    alignas(64) float factor[T][R][kFactorGroups + 16];
    TilePrefetch<R> prefetch(xa[0]->prefetch_bytes, row_bytes, xa[0]->next_tile_prefetch_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, n_groups - g0);
        pass_factors<R, T>(m, xa, r0, g0, count, factor, f);
        // The pass sums into a copy of f, in the same order (the same bits): f's address goes to
        // pass_factors, and GCC then stored each sum after every FMA of the chunk loop. On the
        // lent Xeon 1, 3 and 4 tokens were 0-4% faster with the copy, 2 level (run 165). The
        // copies are written out here, not in a helper: a helper taking the array by reference
        // is what kept f in memory.
        __m512 acc[T][R];
        for (int t = 0; t < T; ++t) {
            for (int i = 0; i < R; ++i) acc[t][i] = f[t][i];
        }
        const std::int64_t c_begin = (g0 << m.group_shift) / kChunkElems;
        const std::int64_t c_end =
            std::min(chunks, (((g0 + count) << m.group_shift) + kChunkElems - 1) / kChunkElems);
        for (std::int64_t c = c_begin; c < c_end; ++c) {
            // The chunk's first group, within the pass.
            const std::int64_t first_group = ((c * kChunkElems) >> m.group_shift) - g0;
            prefetch.ahead_of(codes, c * kChunkBytes);
            // A masked load costs what a plain one does: the short last chunk's missing codes
            // load as zero, and one code path keeps the sums in registers.
            const __mmask64 mask = c < full ? all : tail_mask;
            if constexpr (T == 1) {
                // One token: its digits held in registers across the rows, each row unpacked as
                // it comes (fewer live registers than the rows' nibbles held below).
                const ChunkDigits d(xa[0]->digits + c * kChunkDigitBytes);
                for (int i = 0; i < R; ++i) {
                    const __m512i v = _mm512_maskz_loadu_epi8(mask, codes[i] + c * kChunkBytes);
                    const __m512i lo = _mm512_and_si512(v, nibble);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
                    const float* fac = factor[0][i] + first_group;
                    const __m512 scale =
                        SHARED ? _mm512_permutexvar_ps(lane_group, _mm512_loadu_ps(fac))
                               : _mm512_set1_ps(*fac);
                    acc[0][i] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(chunk_sum(lo, hi, d)), scale, acc[0][i]);
                }
            } else {
                // The rows' codes unpacked once, then each token's digits over them.
                __m512i lo[R], hi[R];
                for (int i = 0; i < R; ++i) {
                    const __m512i v = _mm512_maskz_loadu_epi8(mask, codes[i] + c * kChunkBytes);
                    lo[i] = _mm512_and_si512(v, nibble);
                    hi[i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
                }
                for (int t = 0; t < T; ++t) {
                    const ChunkDigits d(xa[t]->digits + c * kChunkDigitBytes);
                    for (int i = 0; i < R; ++i) {
                        const float* fac = factor[t][i] + first_group;
                        const __m512 scale =
                            SHARED ? _mm512_permutexvar_ps(lane_group, _mm512_loadu_ps(fac))
                                   : _mm512_set1_ps(*fac);
                        acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(chunk_sum(lo[i], hi[i], d)),
                                                    scale, acc[t][i]);
                    }
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            for (int i = 0; i < R; ++i) f[t][i] = acc[t][i];
        }
    }
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) out[t][i] = _mm512_reduce_add_ps(f[t][i]);
    }
}

// The 8-bit form of dot_tile: chunks of 64 code bytes (64 elements, one group of 64, half one
// of 128 or two of 32), each lane's 4 codes against its 4 elements' digits in element order:
// A = S0 · 2^7 + S1 from 2 vpdpbusd, the second starting from the first's sums shifted
// (|S0| <= 4·255·127 leaves room). SHARED: groups of 32
// (lanes 0-7 and 8-15 take their factors through a permute).
template <int R, bool SHARED, int T>
HWY_NOINLINE void dot8_tile(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
                            float (*out)[4]) {
    const WeightMatrix& w = m.w;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = w.row_bytes();  // = cols
    const std::int64_t chunks = (w.cols + kChunk8Elems - 1) / kChunk8Elems;
    const std::int64_t tail_bytes = row_bytes - (chunks - 1) * kChunk8Elems;  // 32 or 64
    const std::int64_t full = tail_bytes == kChunk8Elems ? chunks : chunks - 1;
    const __mmask64 tail_mask = _cvtu64_mask64((1ull << (tail_bytes & 63)) - 1);
    const __mmask64 all = _cvtu64_mask64(~0ull);
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    // Lane l covers chunk elements [4l, 4l + 4): group l / 8 of the chunk's two (groups of 32).
    const __m512i lane_group = _mm512_srli_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 3);
    __m512 f[T][R];
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) f[t][i] = _mm512_setzero_ps();
    }
    // pass_factors's (a half last chunk's upper lanes pick the zero past the last group).
    alignas(64) float factor[T][R][kFactorGroups + 16];
    TilePrefetch<R> prefetch(xa[0]->prefetch_bytes, row_bytes, xa[0]->next_tile_prefetch_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, n_groups - g0);
        pass_factors<R, T>(m, xa, r0, g0, count, factor, f);
        __m512 acc[T][R];  // as in dot_tile
        for (int t = 0; t < T; ++t) {
            for (int i = 0; i < R; ++i) acc[t][i] = f[t][i];
        }
        const std::int64_t c_begin = (g0 << m.group_shift) / kChunk8Elems;
        const std::int64_t c_end =
            std::min(chunks, (((g0 + count) << m.group_shift) + kChunk8Elems - 1) / kChunk8Elems);
        for (std::int64_t c = c_begin; c < c_end; ++c) {
            const std::int64_t first_group = ((c * kChunk8Elems) >> m.group_shift) - g0;
            prefetch.ahead_of(codes, c * kChunk8Elems);
            const __mmask64 mask = c < full ? all : tail_mask;
            __m512i v[R];
            for (int i = 0; i < R; ++i) {
                v[i] = _mm512_maskz_loadu_epi8(mask, codes[i] + c * kChunk8Elems);
            }
            for (int t = 0; t < T; ++t) {
                const std::int8_t* d = xa[t]->digits + c * kChunk8DigitBytes;
                const __m512i d0 = _mm512_loadu_si512(d);
                const __m512i d1 = _mm512_loadu_si512(d + kChunk8Elems);
                for (int i = 0; i < R; ++i) {
                    const float* fac = factor[t][i] + first_group;
                    const __m512 scale =
                        SHARED ? _mm512_permutexvar_ps(lane_group, _mm512_loadu_ps(fac))
                               : _mm512_set1_ps(*fac);
                    const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[i], d0);
                    const __m512i sum = _mm512_dpbusd_epi32(
                        _mm512_slli_epi32(a, kPosition[1] - kPosition[0]), v[i], d1);
                    acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[t][i]);
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            for (int i = 0; i < R; ++i) f[t][i] = acc[t][i];
        }
    }
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) out[t][i] = _mm512_reduce_add_ps(f[t][i]);
    }
}

// gemv_avx512 for T tokens at once: y[t] = W · x_t (+ bias).
template <int T>
void gemv_avx512_tokens(const WeightMatrix& w, const SplitInt8Activations* const* xa,
                        std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                        float* const* y) {
    const Tile m{w, *xa[0], w.cols / w.group_size, group_shift(w)};
    // Groups of 32 and 64: more than one per 128-element chunk (8-bit: groups of 32, per
    // 64-element chunk). The lambdas only call the tiles (no vector code of their own), so the
    // target region need not reach them.
    if (w.bits == 8) {
        for_each_row_tile_of_tokens<T>(row_begin, row_end, bias, y,
                                       [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
                                           if (w.group_size < kChunk8Elems) {
                                               n == 4 ? dot8_tile<4, true, T>(m, xa, r, out)
                                                      : dot8_tile<1, true, T>(m, xa, r, out);
                                           } else {
                                               n == 4 ? dot8_tile<4, false, T>(m, xa, r, out)
                                                      : dot8_tile<1, false, T>(m, xa, r, out);
                                           }
                                       });
    } else if (w.group_size < kChunkElems) {
        for_each_row_tile_of_tokens<T>(
            row_begin, row_end, bias, y, [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
                n == 4 ? dot_tile<4, true, T>(m, xa, r, out) : dot_tile<1, true, T>(m, xa, r, out);
            });
    } else {
        for_each_row_tile_of_tokens<T>(row_begin, row_end, bias, y,
                                       [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
                                           n == 4 ? dot_tile<4, false, T>(m, xa, r, out)
                                                  : dot_tile<1, false, T>(m, xa, r, out);
                                       });
    }
}

void gemv_avx512(const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
                 std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                 float* const* ys) {
    with_token_count(count, [&](auto t) {
        gemv_avx512_tokens<decltype(t)::value>(w, xs, row_begin, row_end, bias, ys);
    });
}

}  // namespace split_int8
HWY_POP_ATTRIBUTES
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // BRIGADE_INT8_X86

#if BRIGADE_INT8_X86 || BRIGADE_INT8_NEON_DOT

namespace {

bool variant_runs_here(SplitInt8Variant v) {
    switch (v) {
#if BRIGADE_INT8_X86
        case SplitInt8Variant::kAvx2:
            return int8_detail::cpu_has_avx2();
        case SplitInt8Variant::kAvxVnni:
            return int8_detail::cpu_has_avx_vnni();
        case SplitInt8Variant::kAvx512Vnni:
            return int8_detail::cpu_has_avx512_vnni();
#endif
#if BRIGADE_INT8_NEON_DOT
        case SplitInt8Variant::kNeonDot:
            return true;  // compiled only for CPUs with the dot product
#endif
        default:
            return false;
    }
}

}  // namespace

const char* split_int8_variant_name(SplitInt8Variant variant) {
    switch (variant) {
        case SplitInt8Variant::kAvx2:
            return "avx2";
        case SplitInt8Variant::kAvxVnni:
            return "avx-vnni";
        case SplitInt8Variant::kAvx512Vnni:
            return "avx512-vnni";
        case SplitInt8Variant::kNeonDot:
            return "neon-dotprod";
        default:
            return "auto";
    }
}

std::vector<SplitInt8Variant> split_int8_variants_available() {
    std::vector<SplitInt8Variant> out;
    // Best last: 64 code bytes a step beat 32, and one instruction per dot product two.
    for (auto v : {SplitInt8Variant::kNeonDot, SplitInt8Variant::kAvx2, SplitInt8Variant::kAvxVnni,
                   SplitInt8Variant::kAvx512Vnni}) {
        if (variant_runs_here(v)) out.push_back(v);
    }
    return out;
}

SplitInt8Variant split_int8_resolve_variant(SplitInt8Variant requested) {
    if (requested != SplitInt8Variant::kAuto && variant_runs_here(requested)) return requested;
    static const SplitInt8Variant best = [] {
        const auto all = split_int8_variants_available();
        return all.empty() ? SplitInt8Variant::kAuto : all.back();
    }();
    return best;
}

bool split_int8_kernel_supports(const WeightMatrix& w, SplitInt8Variant variant) {
    const bool format = w.quantized() && (w.bits == 4 || w.bits == 8) &&
                        (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) &&
                        w.cols % w.group_size == 0 &&
                        (w.scale_dtype == DType::kF32 || w.scale_dtype == DType::kF16 ||
                         w.scale_dtype == DType::kBF16);
    const SplitInt8Variant resolved = split_int8_resolve_variant(variant);
    // 8-bit rows: AVX-512 and AVX-VNNI (without VNNI, vpmaddubsw's i16 pairs of whole-byte
    // codes would saturate; the Arm kernel is written for 4-bit chunks).
    if (w.bits == 8) {
        return format && (resolved == SplitInt8Variant::kAvx512Vnni ||
                          resolved == SplitInt8Variant::kAvxVnni);
    }
    return format && resolved != SplitInt8Variant::kAuto;
}

void split_activations_int8(SplitInt8Variant variant, const WeightMatrix& w, const float* x,
                            std::int64_t begin, std::int64_t end, std::int8_t* digits, float* unit,
                            float* sum) {
#if BRIGADE_INT8_NEON_DOT
    (void)variant;
    split_int8::split_neon(split_int8::kGemvDigits, w, x, begin, end, digits, unit, sum);
#else
    if (split_int8_resolve_variant(variant) == SplitInt8Variant::kAvx512Vnni) {
        if (w.bits == 8) return split_int8::split8_avx512(w, x, begin, end, digits, unit, sum);
        return split_int8::split_avx512(split_int8::kGemvDigits, w, x, begin, end, digits, unit,
                                        sum);
    }
    if (w.bits == 8) return split_int8::split8_avx2(w, x, begin, end, digits, unit, sum);
    split_int8::split_avx2(split_int8::kGemvDigits, w, x, begin, end, digits, unit, sum);
#endif
}

namespace {

// `count` tokens in one pass of `variant`'s kernel, if it has a pass of that many (1-4).
bool gemv_tokens(SplitInt8Variant variant, const WeightMatrix& w,
                 const SplitInt8Activations* const* xs, int count, std::int64_t row_begin,
                 std::int64_t row_end, const WeightVector* bias, float* const* ys) {
    const SplitInt8Variant resolved = split_int8_resolve_variant(variant);
    switch (resolved) {
#if BRIGADE_INT8_X86
        case SplitInt8Variant::kAvx512Vnni:
            if (count > 4) return false;
            split_int8::gemv_avx512(w, xs, count, row_begin, row_end, bias, ys);
            return true;
        case SplitInt8Variant::kAvxVnni:
        case SplitInt8Variant::kAvx2:
            if (count > 4) return false;
            split_int8::gemv_256(resolved == SplitInt8Variant::kAvxVnni, w, xs, count, row_begin,
                                 row_end, bias, ys);
            return true;
#endif
#if BRIGADE_INT8_NEON_DOT
        case SplitInt8Variant::kNeonDot:
            if (count > 4) return false;
            split_int8::gemv_neon_dot(w, xs, count, row_begin, row_end, bias, ys);
            return true;
#endif
        default:
            return false;
    }
}

}  // namespace

void gemv_rows_split_int8(SplitInt8Variant variant, const WeightMatrix& w,
                          const SplitInt8Activations& xa, std::int64_t row_begin,
                          std::int64_t row_end, const WeightVector* bias, float* y) {
    const SplitInt8Activations* xs[1] = {&xa};
    gemv_tokens(variant, w, xs, 1, row_begin, row_end, bias, &y);
}

void gemv_rows_split_int8_pair(SplitInt8Variant variant, const WeightMatrix& w,
                               const SplitInt8Activations& x0, const SplitInt8Activations& x1,
                               std::int64_t row_begin, std::int64_t row_end,
                               const WeightVector* bias, float* y0, float* y1) {
    const SplitInt8Activations* xs[2] = {&x0, &x1};
    float* ys[2] = {y0, y1};
    gemv_tokens(variant, w, xs, 2, row_begin, row_end, bias, ys);
}

bool gemv_rows_split_int8_many(SplitInt8Variant variant, const WeightMatrix& w,
                               const SplitInt8Activations* const* xs, int count,
                               std::int64_t row_begin, std::int64_t row_end,
                               const WeightVector* bias, float* const* ys) {
    return (count == 3 || count == 4) &&
           gemv_tokens(variant, w, xs, count, row_begin, row_end, bias, ys);
}

#else  // neither x86 nor Arm with dot products: no kernel, callers check
       // split_int8_kernel_supports first

const char* split_int8_variant_name(SplitInt8Variant) { return "auto"; }
std::vector<SplitInt8Variant> split_int8_variants_available() { return {}; }
SplitInt8Variant split_int8_resolve_variant(SplitInt8Variant) { return SplitInt8Variant::kAuto; }
bool split_int8_kernel_supports(const WeightMatrix&, SplitInt8Variant) { return false; }
void split_activations_int8(SplitInt8Variant, const WeightMatrix&, const float*, std::int64_t,
                            std::int64_t, std::int8_t*, float*, float*) {}
void gemv_rows_split_int8(SplitInt8Variant, const WeightMatrix&, const SplitInt8Activations&,
                          std::int64_t, std::int64_t, const WeightVector*, float*) {}
void gemv_rows_split_int8_pair(SplitInt8Variant, const WeightMatrix&, const SplitInt8Activations&,
                               const SplitInt8Activations&, std::int64_t, std::int64_t,
                               const WeightVector*, float*, float*) {}
bool gemv_rows_split_int8_many(SplitInt8Variant, const WeightMatrix&,
                               const SplitInt8Activations* const*, int, std::int64_t, std::int64_t,
                               const WeightVector*, float* const*) {
    return false;
}

#endif  // BRIGADE_INT8_X86 || BRIGADE_INT8_NEON_DOT

}  // namespace brigade::model::cpu
