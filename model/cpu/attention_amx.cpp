// Prompt attention's two products through AMX-BF16 tiles (Xeon from Sapphire Rapids on), for
// f16 keys in tiles and f16 values: the scores QKᵀ and the weighted values P·V of 16 query rows
// against a block of up to 64 keys. attention.cpp runs the online softmax around them.
//
// Why: the vector kernel spends 8 FMAs per key and query row (4 for QKᵀ, 4 for P·V at
// head_dim 64), ~9 cycles here, so a 4096-token prompt of Qwen2.5-0.5B spent ~20% of its time
// in attention and a 32k one most of it. TDPBF16PS multiplies 16x32 bf16 by 32x16 bf16 into f32
// sums without the vector ports. What stays on them is turning the f16 cache into bf16 tiles,
// which costs about as much as the FMAs for the 4-7 rows of a decode step (session 19 tried
// it there: twice as slow), but is paid once per key block for all of a prompt tile's rows.
//
// Precision: every f16 key or value is exactly the sum of two bf16 terms (hi: its top 8
// significant bits, truncated; lo: the other 3), and queries and softmax weights are split into
// three bf16 terms (t0, t1 truncated, t2 rounded: within 2^-24 of the f32 value). Products of
// two bf16 are exact in f32 and the tiles accumulate in f32, so QKᵀ = Σ q_t · (k_hi + k_lo)
// over the pairs that matter (q2 · k_lo, below 2^-24 relative, is left out), and likewise P·V:
// the precision class of the f32 kernel. The tile unit treats bf16 subnormals (below 2^-126) as
// zero: against the terms above them, nothing.
//
// Layouts (u16 elements; a tile is 16 rows of 64 bytes, 512 elements):
//   keys      [16-key group][32-dim chunk][hi, lo] B tiles, row r = dims (2r, 2r+1) of 16 keys;
//   values    [32-key chunk][16-dim group][hi, lo] B tiles, row t = keys (2t, 2t+1) of 16 dims;
//   queries   [32-dim chunk][term] A tiles of 16 rows x 32 dims;
//   weights   [32-key chunk][term] A tiles of 16 rows x 32 keys.
// Tiles 0-3 hold four independent sums (C), 4 the A operand, 5-7 B operands in rotation, so a
// multiply rarely waits for the previous one to finish reading its tile.

#include <algorithm>
#include <cstdint>

#include "model/cpu/amx_tiles.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86

#if BRIGADE_INT8_X86
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>
#endif

namespace brigade::model::cpu {

namespace {
constexpr std::int64_t kTileElems = 512;  // u16 per tile
constexpr std::int64_t kChunk = 32;       // dims (or keys) one tile multiply takes
constexpr std::int64_t kTerms = 3;        // bf16 terms of a query or a softmax weight
constexpr std::int64_t kRows = kAttentionAmxRows;
constexpr std::int64_t kMaxHeadDim = 128;

std::int64_t key_tile_elems(std::int64_t d) { return 4 * (d / kChunk) * 2 * kTileElems; }
std::int64_t value_tile_elems(std::int64_t d) { return 2 * (d / 16) * 2 * kTileElems; }
std::int64_t query_group_elems(std::int64_t d) { return (d / kChunk) * kTerms * kTileElems; }
std::int64_t weight_tile_elems() { return 2 * kTerms * kTileElems; }
std::int64_t align64(std::int64_t bytes) { return (bytes + 63) / 64 * 64; }
std::int64_t row_groups(std::int64_t rows) { return (rows + kRows - 1) / kRows; }
}  // namespace

bool attention_amx_supports(const AttentionArgs& a) {
    return a.kv_dtype == DType::kF16 && a.k_layout == KeyLayout::kTiles && a.head_dim > 0 &&
           a.head_dim % kChunk == 0 && a.head_dim <= kMaxHeadDim && amx_bf16_available();
}

std::int64_t attention_amx_scratch_bytes(std::int64_t head_dim, std::int64_t rows) {
    if (head_dim % kChunk != 0 || head_dim > kMaxHeadDim) return 0;
    const std::int64_t u16 = 2;
    return 64 + align64(key_tile_elems(head_dim) * u16) +
           align64(value_tile_elems(head_dim) * u16) +
           align64(row_groups(rows) * query_group_elems(head_dim) * u16) +
           align64(weight_tile_elems() * u16) + align64(kRows * kAttentionKeyBlock * 4) +
           align64(kRows * head_dim * 4);
}

AmxAttentionScratch amx_attention_scratch(void* base, std::int64_t head_dim, std::int64_t rows) {
    auto at = reinterpret_cast<std::uintptr_t>(base);
    at = (at + 63) / 64 * 64;
    auto take = [&](std::int64_t bytes) {
        void* p = reinterpret_cast<void*>(at);
        at += static_cast<std::uintptr_t>(align64(bytes));
        return p;
    };
    AmxAttentionScratch s;
    s.keys = static_cast<std::uint16_t*>(take(key_tile_elems(head_dim) * 2));
    s.values = static_cast<std::uint16_t*>(take(value_tile_elems(head_dim) * 2));
    s.queries =
        static_cast<std::uint16_t*>(take(row_groups(rows) * query_group_elems(head_dim) * 2));
    s.query_group_elems = query_group_elems(head_dim);
    s.weights = static_cast<std::uint16_t*>(take(weight_tile_elems() * 2));
    s.scores = static_cast<float*>(take(kRows * kAttentionKeyBlock * 4));
    s.weighted = static_cast<float*>(take(kRows * head_dim * 4));
    return s;
}

#if BRIGADE_INT8_X86

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")

namespace {

// Row `hi` / `lo` of a B tile from 16 element pairs (a_i, b_i) of f16 values widened to f32:
// dword i holds (bf16 of a_i, bf16 of b_i), hi the top 8 significant bits (truncated), lo
// the exact rest (an f16 has 11).
HWY_INLINE void pack_pairs(__m512 a, __m512 b, std::uint16_t* hi, std::uint16_t* lo) {
    constexpr __mmask32 kOdd = 0xAAAAAAAAu;
    const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m512i ai = _mm512_castps_si512(a);
    const __m512i bi = _mm512_castps_si512(b);
    _mm512_store_si512(hi, _mm512_mask_blend_epi16(kOdd, _mm512_srli_epi32(ai, 16), bi));
    const __m512 a_lo = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_and_si512(ai, top)));
    const __m512 b_lo = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_and_si512(bi, top)));
    _mm512_store_si512(
        lo, _mm512_mask_blend_epi16(kOdd, _mm512_srli_epi32(_mm512_castps_si512(a_lo), 16),
                                    _mm512_castps_si512(b_lo)));
}

HWY_INLINE __m512 widen16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The three bf16 terms of 32 floats (x0: the first 16) as one row of three A tiles `stride`
// elements apart: t0, t1 the top bits of x and of what is left, t2 the rest rounded.
HWY_INLINE void split_terms(__m512 x0, __m512 x1, std::uint16_t* out, std::int64_t stride) {
    const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    auto trunc = [&](__m512 x) {
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), top));
    };
    const __m512 a0 = trunc(x0), b0 = trunc(x1);
    const __m512 r0 = _mm512_sub_ps(x0, a0), s0 = _mm512_sub_ps(x1, b0);
    const __m512 a1 = trunc(r0), b1 = trunc(s0);
    const __m512 r1 = _mm512_sub_ps(r0, a1), s1 = _mm512_sub_ps(s0, b1);
    _mm512_store_si512(out, (__m512i)_mm512_cvtne2ps_pbh(b0, a0));
    _mm512_store_si512(out + stride, (__m512i)_mm512_cvtne2ps_pbh(b1, a1));
    _mm512_store_si512(out + 2 * stride, (__m512i)_mm512_cvtne2ps_pbh(s1, r1));
}

// C tile c += A (tile 4) x the B tile at b, loaded into tile s (5-7). GCC's tile intrinsics
// take the tile numbers as literal tokens, hence macros.
#define BRIGADE_AMX_MULTIPLY(c, s, b) \
    do {                              \
        _tile_loadd(s, (b), 64);      \
        _tile_dpbf16ps(c, 4, s);      \
    } while (0)

// C tiles 0..n-1 (n <= 4) += A (tile 4) x the B tiles b + g * step, loaded into B slots s0, s1,
// s2, s0 (consecutive loads to different tiles, so a load rarely waits for a multiply to finish
// reading its tile).
#define BRIGADE_AMX_MULTIPLY_ROW(b, step, n, s0, s1, s2)            \
    do {                                                            \
        BRIGADE_AMX_MULTIPLY(0, s0, (b));                           \
        if ((n) > 1) BRIGADE_AMX_MULTIPLY(1, s1, (b) + (step));     \
        if ((n) > 2) BRIGADE_AMX_MULTIPLY(2, s2, (b) + 2 * (step)); \
        if ((n) > 3) BRIGADE_AMX_MULTIPLY(3, s0, (b) + 3 * (step)); \
    } while (0)

// C tiles 0..n-1 += Σ over the five term pairs (a0, a1 with hi and lo, a2 with hi) of the A
// terms at a (three tiles kTileElems apart) and the B tiles at b (hi) and b + kTileElems (lo).
#define BRIGADE_AMX_FIVE_TERMS(a, b, step, n)                         \
    do {                                                              \
        _tile_loadd(4, (a), 64);                                      \
        BRIGADE_AMX_MULTIPLY_ROW((b), step, n, 5, 6, 7);              \
        BRIGADE_AMX_MULTIPLY_ROW((b) + kTileElems, step, n, 6, 7, 5); \
        _tile_loadd(4, (a) + kTileElems, 64);                         \
        BRIGADE_AMX_MULTIPLY_ROW((b), step, n, 7, 5, 6);              \
        BRIGADE_AMX_MULTIPLY_ROW((b) + kTileElems, step, n, 5, 6, 7); \
        _tile_loadd(4, (a) + 2 * kTileElems, 64);                     \
        BRIGADE_AMX_MULTIPLY_ROW((b), step, n, 6, 7, 5);              \
    } while (0)

HWY_INLINE void store_sums(float* out, std::size_t stride, std::int64_t column_step,
                           std::int64_t n) {
    _tile_stored(0, out, stride);
    if (n > 1) _tile_stored(1, out + column_step, stride);
    if (n > 2) _tile_stored(2, out + 2 * column_step, stride);
    if (n > 3) _tile_stored(3, out + 3 * column_step, stride);
}

}  // namespace

void amx_attention_configure() {
    alignas(64) AmxTileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = kRows;
        cfg.colsb[t] = 64;
    }
    publish_tile_config(cfg);
    _tile_loadconfig(&cfg);
}

void amx_attention_release() { _tile_release(); }

void amx_stage_keys(const std::uint16_t* kt, std::int64_t tile_stride, std::int64_t n_keys,
                    std::int64_t d, std::uint16_t* tiles) {
    const std::int64_t chunks = d / kChunk;
    const std::int64_t groups = (n_keys + kKeyTile - 1) / kKeyTile;
    for (std::int64_t g = 0; g < groups; ++g) {
        const std::uint16_t* tile = kt + g * tile_stride;  // [d][16 keys]
        for (std::int64_t h = 0; h < chunks; ++h) {
            std::uint16_t* hi = tiles + (g * chunks + h) * 2 * kTileElems;
            for (std::int64_t r = 0; r < 16; ++r) {
                const std::int64_t c = h * kChunk + 2 * r;
                pack_pairs(widen16(tile + c * kKeyTile), widen16(tile + (c + 1) * kKeyTile),
                           hi + r * 32, hi + kTileElems + r * 32);
            }
        }
    }
}

void amx_stage_values(const std::uint16_t* v0, std::int64_t stride, std::int64_t n_keys,
                      std::int64_t d, std::uint16_t* tiles) {
    const std::int64_t dim_groups = d / 16;
    const std::int64_t chunks = (n_keys + kChunk - 1) / kChunk;
    const __m512 zero = _mm512_setzero_ps();
    for (std::int64_t kc = 0; kc < chunks; ++kc) {
        for (std::int64_t t = 0; t < 16; ++t) {
            const std::int64_t j = kc * kChunk + 2 * t;
            // Keys past the block's end are zeros: their weights are 0, and 0 times whatever
            // the memory there holds could be NaN.
            const std::uint16_t* a = j < n_keys ? v0 + j * stride : nullptr;
            const std::uint16_t* b = j + 1 < n_keys ? v0 + (j + 1) * stride : nullptr;
            for (std::int64_t g = 0; g < dim_groups; ++g) {
                std::uint16_t* hi = tiles + (kc * dim_groups + g) * 2 * kTileElems;
                pack_pairs(a ? widen16(a + g * 16) : zero, b ? widen16(b + g * 16) : zero,
                           hi + t * 32, hi + kTileElems + t * 32);
            }
        }
    }
}

void amx_stage_queries(const float* const* rows, std::int64_t n, std::int64_t d, float scale,
                       std::uint16_t* tiles) {
    const std::int64_t chunks = d / kChunk;
    const __m512 vs = _mm512_set1_ps(scale);
    const __m512 zero = _mm512_setzero_ps();
    for (std::int64_t h = 0; h < chunks; ++h) {
        std::uint16_t* a = tiles + h * kTerms * kTileElems;
        for (std::int64_t r = 0; r < kRows; ++r) {
            if (r >= n) {
                split_terms(zero, zero, a + r * 32, kTileElems);
                continue;
            }
            const float* x = rows[r] + h * kChunk;
            split_terms(_mm512_mul_ps(_mm512_loadu_ps(x), vs),
                        _mm512_mul_ps(_mm512_loadu_ps(x + 16), vs), a + r * 32, kTileElems);
        }
    }
}

void amx_scores(const std::uint16_t* queries, const std::uint16_t* keys, std::int64_t n_keys,
                std::int64_t d, float* scores) {
    const std::int64_t chunks = d / kChunk;
    const std::int64_t groups = (n_keys + kKeyTile - 1) / kKeyTile;  // 1..4
    const std::int64_t group_step = chunks * 2 * kTileElems;
    _tile_zero(0);
    if (groups > 1) _tile_zero(1);
    if (groups > 2) _tile_zero(2);
    if (groups > 3) _tile_zero(3);
    for (std::int64_t h = 0; h < chunks; ++h) {
        const std::uint16_t* a = queries + h * kTerms * kTileElems;
        const std::uint16_t* b = keys + h * 2 * kTileElems;
        BRIGADE_AMX_FIVE_TERMS(a, b, group_step, groups);
    }
    store_sums(scores, kAttentionKeyBlock * 4, kKeyTile, groups);
}

void amx_weighted_values(const float* p, const std::int64_t* counts, const std::uint16_t* values,
                         std::int64_t d, std::uint16_t* weights, float* out) {
    std::int64_t count = 0;
    for (std::int64_t r = 0; r < kRows; ++r) count = std::max(count, counts[r]);
    const std::int64_t chunks = (count + kChunk - 1) / kChunk;
    const __m512 zero = _mm512_setzero_ps();
    for (std::int64_t kc = 0; kc < chunks; ++kc) {
        std::uint16_t* a = weights + kc * kTerms * kTileElems;
        for (std::int64_t r = 0; r < kRows; ++r) {
            // Weights past a row's own count (its causal limit) are 0.
            const std::int64_t valid = std::clamp<std::int64_t>(counts[r] - kc * kChunk, 0, 32);
            if (valid == 0) {
                split_terms(zero, zero, a + r * 32, kTileElems);
                continue;
            }
            const auto m0 = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1);
            const auto m1 = static_cast<__mmask16>(valid >= 32   ? 0xFFFF
                                                   : valid <= 16 ? 0
                                                                 : (1u << (valid - 16)) - 1);
            const float* x = p + r * kAttentionKeyBlock + kc * kChunk;
            split_terms(_mm512_maskz_loadu_ps(m0, x), _mm512_maskz_loadu_ps(m1, x + 16), a + r * 32,
                        kTileElems);
        }
    }
    const std::int64_t dim_groups = d / 16;
    const std::int64_t group_step = 2 * kTileElems;
    const auto out_stride = static_cast<std::size_t>(d * 4);
    for (std::int64_t g0 = 0; g0 < dim_groups; g0 += 4) {
        const std::int64_t n = std::min<std::int64_t>(4, dim_groups - g0);
        _tile_zero(0);
        if (n > 1) _tile_zero(1);
        if (n > 2) _tile_zero(2);
        if (n > 3) _tile_zero(3);
        for (std::int64_t kc = 0; kc < chunks; ++kc) {
            const std::uint16_t* a = weights + kc * kTerms * kTileElems;
            const std::uint16_t* b = values + (kc * dim_groups + g0) * 2 * kTileElems;
            BRIGADE_AMX_FIVE_TERMS(a, b, group_step, n);
        }
        store_sums(out + g0 * 16, out_stride, 16, n);
    }
}

#undef BRIGADE_AMX_FIVE_TERMS
#undef BRIGADE_AMX_MULTIPLY_ROW
#undef BRIGADE_AMX_MULTIPLY

HWY_POP_ATTRIBUTES
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else  // !BRIGADE_INT8_X86

void amx_attention_configure() {}
void amx_attention_release() {}
void amx_stage_keys(const std::uint16_t*, std::int64_t, std::int64_t, std::int64_t,
                    std::uint16_t*) {}
void amx_stage_values(const std::uint16_t*, std::int64_t, std::int64_t, std::int64_t,
                      std::uint16_t*) {}
void amx_stage_queries(const float* const*, std::int64_t, std::int64_t, float, std::uint16_t*) {}
void amx_scores(const std::uint16_t*, const std::uint16_t*, std::int64_t, std::int64_t, float*) {}
void amx_weighted_values(const float*, const std::int64_t*, const std::uint16_t*, std::int64_t,
                         std::uint16_t*, float*) {}

#endif  // BRIGADE_INT8_X86

}  // namespace brigade::model::cpu
