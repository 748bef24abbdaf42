// Decode of 2-31 tokens on MLX affine 4- and 8-bit weights through AMX tile multiplies (Intel
// Xeon from Sapphire Rapids on), with the activations split into the four int8 digits of the
// split-int8 path (matmul_split_int8.cpp): the same f32-class precision.
//
// Why: a batch of decode tokens with f32 activations costs an FMA per weight and token, and the
// weight's decode on top; on the lent 16-vCPU Xeons 4 sequences of Qwen2.5-0.5B q4 decoded only
// 1.4x faster than one, 16 sequences 2.3x (bench/RESULTS.md). One TDPBUSD multiplies a 16x64
// tile of unsigned bytes by a 64x16 tile of signed ones into 16x16 int32 sums: 16,384
// multiply-adds where an AVX-512 FMA does 16.
//
// Per weight group g (32, 64 or 128 columns), 16 rows r and a block of 16 tokens t:
//   A (16 rows x K bytes): the rows' codes of the group, one byte each, even elements first
//                          and odd ones after (how a 4-bit byte holds them: low nibble even);
//   B_k (K/4 x 64 bytes):  digit k of the same elements of the 16 tokens, in the dot-product
//                          layout (B_k[p/4][4t + p%4] = digit k of token t at K position p);
//   C_k = A · B_k          S_k[r][t] = Σ q·d_k over the group, exact in int32;
// and, as in the one-token kernel, with unit_tg = step_tg · 2^-17,
//   Σ q·x = unit_tg · (2^11 · (S0·2^6 + S1) + (S2·2^5 + S3))
//   y[t][r] += scale_rg · unit_tg · that + bias_rg · Σx_tg.
// K is the group (64 at most per tile; groups of 128 take two tiles into the same sums). The
// four C tiles are stored after every group and folded into 16 accumulators (one per row, the
// tokens along the vector) by AVX-512: that fold, ~14 instructions per row and group, is the
// kernel's vector cost, paid once for up to 16 tokens.
//
// The digits come from the split-int8 quantizer (split_int8::split_avx512) token by token and
// are then transposed into the B tiles, all tokens of a group at a time, so the batch's digits
// are those a token alone would get.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/cpu/amx_tiles.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86, the CPUID helpers
#include "model/cpu/matmul_split_int8.hpp"
#include "model/cpu/weight_decode.hpp"

#if BRIGADE_INT8_X86
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace brigade::model::cpu {

#if BRIGADE_INT8_X86
namespace {

constexpr std::int64_t kTileTokens = 16;
constexpr std::int64_t kTileRows = 16;
constexpr int kDigits = split_int8::kDigits;

// AMX-TILE and AMX-INT8 (leaf 7 EDX 24, 25), AVX-512 with VNNI, VBMI (leaf 7 ECX 1), the OS
// saving the tile state (XCR0 17-18), and Linux letting this process use the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16 on).
bool detect_amx() {
    using int8_detail::bit;
    const int8_detail::Regs l7 = int8_detail::cpuid(7, 0);
    if (!(bit(l7.edx, 24) && bit(l7.edx, 25) && bit(l7.ecx, 1) &&
          int8_detail::cpu_has_avx512_vnni() && int8_detail::os_saves((1u << 17) | (1u << 18)))) {
        return false;
    }
#if defined(__linux__)
    constexpr long kReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;  // no AMX on other systems (macOS on Intel has none to offer)
#endif
}

std::int64_t steps_of(const WeightMatrix& w) { return w.group_size == 128 ? 2 : 1; }
// K bytes of a tile: the group, 64 at most.
std::int64_t k_bytes(const WeightMatrix& w) { return std::min<std::int64_t>(w.group_size, 64); }
// Bytes of one group's B tiles for a token block: 4 digits x group x 16 tokens.
std::int64_t group_tile_bytes(const WeightMatrix& w) { return kDigits * w.group_size * 16; }

}  // namespace

bool amx_available() {
    static const bool has = detect_amx();
    return has;
}

bool amx_bf16_available() {
    // AMX-BF16: leaf 7 EDX bit 22.
    static const bool has = amx_available() && int8_detail::bit(int8_detail::cpuid(7, 0).edx, 22);
    return has;
}

bool amx_kernel_supports(const WeightMatrix& w) {
    const bool format = w.quantized() && (w.bits == 4 || w.bits == 8) &&
                        (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) &&
                        w.cols % w.group_size == 0 &&
                        (w.scale_dtype == DType::kF32 || w.scale_dtype == DType::kF16 ||
                         w.scale_dtype == DType::kBF16);
    return format && amx_available();
}

std::int64_t amx_token_blocks(std::int64_t n) { return (n + kTileTokens - 1) / kTileTokens; }

std::int64_t amx_tile_bytes(const WeightMatrix& w, std::int64_t n) {
    return amx_token_blocks(n) * (w.cols / w.group_size) * group_tile_bytes(w);
}

std::int64_t amx_staging_bytes(const WeightMatrix& w, std::int64_t n) {
    return n * split_int8_token_bytes(w);
}

std::int64_t amx_row_scratch_floats(const WeightMatrix& w) {
    return 2 * kTileRows * (w.cols / w.group_size);
}

// GCC 12's AVX-512 intrinsics: see matmul_split_int8.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vbmi,amx-tile,amx-int8")
namespace {

void prepare_group(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t g,
                   const AmxBuffers& buf) {
    const std::int64_t n_groups = w.cols / w.group_size;
    const std::int64_t token_bytes = split_int8_token_bytes(w);
    const std::int64_t group = w.group_size;
    const std::int64_t kb = k_bytes(w);
    for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t i = t * n_groups + g;
        split_int8::split_avx512(w, x, i, i + 1, buf.staging, buf.staging_unit, buf.staging_sum);
        const std::int64_t at = (t / kTileTokens * n_groups + g) * kTileTokens + t % kTileTokens;
        buf.unit[at] = buf.staging_unit[i];
        buf.sum[at] = buf.staging_sum[i];
    }
    // The group's elements in the staging layout: chunk e / 128, per digit 64 even elements
    // and 64 odd ones. A group of 32 or 64 is a run of group / 2 bytes in each; one of 128 is
    // a whole chunk.
    const std::int64_t first = g * group;
    const std::int64_t chunk_offset =
        first / split_int8::kChunkElems * split_int8::kChunkDigitBytes;
    const std::int64_t in_run = first % split_int8::kChunkElems / 2;
    for (std::int64_t tb = 0; tb < amx_token_blocks(n); ++tb) {
        std::int8_t* out = buf.tiles + (tb * n_groups + g) * group_tile_bytes(w);
        for (std::int64_t step = 0; step < steps_of(w); ++step) {
            for (int k = 0; k < kDigits; ++k) {
                // K vectors of the block's 16 tokens (zero past n), then their transpose by
                // 4-byte words: word q of token t goes to row q, column t.
                alignas(64) std::uint32_t kv[kTileTokens][16] = {};
                for (std::int64_t t = 0; t < kTileTokens; ++t) {
                    const std::int64_t token = tb * kTileTokens + t;
                    if (token >= n) break;
                    const std::int8_t* base =
                        buf.staging + token * token_bytes + chunk_offset + k * 128 + in_run;
                    auto* dst = reinterpret_cast<std::int8_t*>(kv[t]);
                    if (group == 128) {
                        std::memcpy(dst, base + step * 64, 64);
                    } else {
                        std::memcpy(dst, base, static_cast<std::size_t>(group / 2));
                        std::memcpy(dst + group / 2, base + 64,
                                    static_cast<std::size_t>(group / 2));
                    }
                }
                auto* tile = reinterpret_cast<std::uint32_t*>(out + (step * kDigits + k) * kb * 16);
                for (std::int64_t q = 0; q < kb / 4; ++q) {
                    for (std::int64_t t = 0; t < kTileTokens; ++t) tile[q * 16 + t] = kv[t][q];
                }
            }
        }
    }
}

}  // namespace

void prepare_amx_activations(const WeightMatrix& w, const float* x, std::int64_t n,
                             std::int64_t group_begin, std::int64_t group_end,
                             const AmxBuffers& buf) {
    for (std::int64_t g = group_begin; g < group_end; ++g) prepare_group(w, x, n, g, buf);
}

namespace {

// Tiles 0-3: the digits' sums C_k (16 rows x 16 tokens of int32); 4 and 5: the codes of a
// group's first and second K step; 6 and 7: B tiles, alternating.
void configure_tiles(std::int64_t kb) {
    alignas(64) AmxTileConfig cfg;
    for (int t = 0; t < 4; ++t) {
        cfg.rows[t] = kTileRows;
        cfg.colsb[t] = 64;
    }
    for (int t = 4; t < 6; ++t) {
        cfg.rows[t] = kTileRows;
        cfg.colsb[t] = static_cast<std::uint16_t>(kb);
    }
    for (int t = 6; t < 8; ++t) {
        cfg.rows[t] = static_cast<std::uint8_t>(kb / 4);
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

// f32 copies of `count` scales (or biases) of one row from element `index` on.
void widen_affine(DType dtype, const void* base, std::int64_t index, std::int64_t count,
                  float* out) {
    std::int64_t i = 0;
    if (dtype == DType::kF32) {
        std::memcpy(out, static_cast<const float*>(base) + index,
                    static_cast<std::size_t>(count) * sizeof(float));
        return;
    }
    const auto* p = static_cast<const std::uint16_t*>(base) + index;
    for (; i + 16 <= count; i += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
        const __m512 f = dtype == DType::kF16
                             ? _mm512_cvtph_ps(h)
                             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_storeu_ps(out + i, f);
    }
    if (i < count) {
        const __mmask16 mask = _cvtu32_mask16((1u << (count - i)) - 1u);
        const __m256i h = _mm256_maskz_loadu_epi16(mask, p + i);
        const __m512 f = dtype == DType::kF16
                             ? _mm512_cvtph_ps(h)
                             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_mask_storeu_ps(out + i, mask, f);
    }
}

// A tiles of one group for 16 rows (`codes[m]`: row m's codes, rows past the block's end
// repeat its last row): one K step into a0, the second (groups of 128) into a1. Row m at
// m * 64, its K bytes the group's even elements, then the odd ones.
HWY_INLINE void unpack_group(const WeightMatrix& w, const std::uint8_t* const* codes,
                             std::int64_t g, std::uint8_t* a0, std::uint8_t* a1) {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    if (w.bits == 4) {
        const std::int64_t bytes = w.group_size / 2;  // 16, 32 or 64
        const __mmask64 mask = _cvtu64_mask64(bytes == 64 ? ~0ull : (1ull << bytes) - 1);
        for (int m = 0; m < kTileRows; ++m) {
            const __m512i v = _mm512_maskz_loadu_epi8(mask, codes[m] + g * bytes);
            const __m512i lo = _mm512_and_si512(v, nibble);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
            if (bytes == 64) {
                _mm512_store_si512(a0 + m * 64, lo);
                _mm512_store_si512(a1 + m * 64, hi);
            } else {
                // lo's first `bytes`, then hi's: one 2-source byte permute.
                alignas(64) static constexpr std::uint8_t kJoin32[64] = {
                    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
                    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95};
                alignas(64) static constexpr std::uint8_t kJoin16[64] = {
                    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79};
                const __m512i index = _mm512_load_si512(bytes == 32 ? kJoin32 : kJoin16);
                _mm512_store_si512(a0 + m * 64, _mm512_permutex2var_epi8(lo, index, hi));
            }
        }
        return;
    }
    // 8 bits: the group's bytes, even ones first.
    alignas(64) static constexpr auto kEvenOdd = [] {
        struct Index {
            std::uint8_t even_odd64[64], even_odd32[64], even128[64], odd128[64];
        } ix{};
        for (int i = 0; i < 32; ++i) {
            ix.even_odd64[i] = static_cast<std::uint8_t>(2 * i);
            ix.even_odd64[32 + i] = static_cast<std::uint8_t>(2 * i + 1);
        }
        for (int i = 0; i < 16; ++i) {
            ix.even_odd32[i] = static_cast<std::uint8_t>(2 * i);
            ix.even_odd32[16 + i] = static_cast<std::uint8_t>(2 * i + 1);
        }
        for (int i = 0; i < 64; ++i) {
            ix.even128[i] = static_cast<std::uint8_t>(2 * i);
            ix.odd128[i] = static_cast<std::uint8_t>(2 * i + 1);
        }
        return ix;
    }();
    const std::int64_t bytes = w.group_size;
    for (int m = 0; m < kTileRows; ++m) {
        const std::uint8_t* p = codes[m] + g * bytes;
        if (bytes == 128) {
            const __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
            _mm512_store_si512(a0 + m * 64, _mm512_permutex2var_epi8(
                                                lo, _mm512_loadu_si512(kEvenOdd.even128), hi));
            _mm512_store_si512(
                a1 + m * 64, _mm512_permutex2var_epi8(lo, _mm512_loadu_si512(kEvenOdd.odd128), hi));
        } else {
            const __mmask64 mask = _cvtu64_mask64(bytes == 64 ? ~0ull : (1ull << bytes) - 1);
            const __m512i v = _mm512_maskz_loadu_epi8(mask, p);
            const __m512i index =
                _mm512_loadu_si512(bytes == 64 ? kEvenOdd.even_odd64 : kEvenOdd.even_odd32);
            _mm512_store_si512(a0 + m * 64, _mm512_permutexvar_epi8(index, v));
        }
    }
}

// C_0..C_3 of one group for 16 rows (A in tiles 4, 5) and the token block's B tiles at `b`.
HWY_INLINE void multiply_group(const std::int8_t* b, std::int64_t steps, std::int64_t tile_bytes) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(6, b, 64);
    _tile_dpbusd(0, 4, 6);
    _tile_loadd(7, b + tile_bytes, 64);
    _tile_dpbusd(1, 4, 7);
    _tile_loadd(6, b + 2 * tile_bytes, 64);
    _tile_dpbusd(2, 4, 6);
    _tile_loadd(7, b + 3 * tile_bytes, 64);
    _tile_dpbusd(3, 4, 7);
    if (steps == 2) {
        b += 4 * tile_bytes;
        _tile_loadd(6, b, 64);
        _tile_dpbusd(0, 5, 6);
        _tile_loadd(7, b + tile_bytes, 64);
        _tile_dpbusd(1, 5, 7);
        _tile_loadd(6, b + 2 * tile_bytes, 64);
        _tile_dpbusd(2, 5, 6);
        _tile_loadd(7, b + 3 * tile_bytes, 64);
        _tile_dpbusd(3, 5, 7);
    }
}

// One block of up to 16 rows against one block of up to 16 tokens.
struct RowBlock {
    const WeightMatrix& w;
    const AmxActivations& xa;
    std::int64_t n_groups;
    const float* scale;  // [16][n_groups] f32
    const float* bias;   // [16][n_groups] f32
    std::int64_t rows;   // of the block, 1 to 16
};

// acc[m] += row m's part of one group from the sums C_k in `c` (C_k[m] at c + k * 256 + m * 16).
HWY_INLINE void fold_group(const std::int32_t* c, __m512 unit_g, __m512 sum_g, const float* scale,
                           const float* bias, std::int64_t stride, __m512* acc) {
#pragma GCC unroll 16
    for (int m = 0; m < kTileRows; ++m) {
        const __m512i s0 = _mm512_load_si512(c + m * 16);
        const __m512i s1 = _mm512_load_si512(c + 256 + m * 16);
        const __m512i s2 = _mm512_load_si512(c + 512 + m * 16);
        const __m512i s3 = _mm512_load_si512(c + 768 + m * 16);
        const __m512i high = _mm512_add_epi32(_mm512_slli_epi32(s0, 6), s1);
        const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(s2, 5), s3);
        const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(2048.0f),
                                         _mm512_cvtepi32_ps(low));
        acc[m] =
            _mm512_fmadd_ps(_mm512_mul_ps(v, unit_g), _mm512_set1_ps(scale[m * stride]), acc[m]);
        acc[m] = _mm512_fmadd_ps(sum_g, _mm512_set1_ps(bias[m * stride]), acc[m]);
    }
}

// acc[m] (the block's 16 tokens) = row m · x for one token block. Each group's codes are
// unpacked while the tile unit multiplies the previous group's, and the sums are folded after.
HWY_INLINE void row_block_tokens(const RowBlock& rb, const std::uint8_t* codes,
                                 std::int64_t row_bytes, std::int64_t tb, __m512* acc) {
    const WeightMatrix& w = rb.w;
    const std::int64_t n_groups = rb.n_groups;
    const std::int64_t kb = k_bytes(w);
    const std::int64_t steps = steps_of(w);
    const std::int64_t tile_bytes = kb * 16;
    const std::int64_t group_bytes = w.group_size * w.bits / 8;
    const std::int64_t b_stride = group_tile_bytes(w);
    alignas(64) std::uint8_t a[2][2][kTileRows * 64];
    alignas(64) std::int32_t c[kDigits * kTileRows * kTileTokens];
    const std::int8_t* b = rb.xa.tiles + tb * n_groups * b_stride;
    const float* unit = rb.xa.unit + tb * n_groups * kTileTokens;
    const float* sum = rb.xa.sum + tb * n_groups * kTileTokens;
#pragma GCC unroll 16
    for (int m = 0; m < kTileRows; ++m) acc[m] = _mm512_setzero_ps();
    // Rows past the block's end repeat its last row (their sums are dropped).
    const std::uint8_t* rows[kTileRows];
    for (int m = 0; m < kTileRows; ++m)
        rows[m] = codes + std::min<std::int64_t>(m, rb.rows - 1) * row_bytes;
    const std::int64_t prefetch = tb == 0 ? rb.xa.prefetch_bytes : 0;
    unpack_group(w, rows, 0, a[0][0], a[0][1]);
    for (std::int64_t g = 0; g < n_groups; ++g) {
        const int cur = static_cast<int>(g & 1);
        _tile_loadd(4, a[cur][0], 64);
        if (steps == 2) _tile_loadd(5, a[cur][1], 64);
        multiply_group(b + g * b_stride, steps, tile_bytes);
        if (g + 1 < n_groups) {
            if (prefetch > 0 && ((g + 1) * group_bytes) % 64 == 0) {
                for (int m = 0; m < kTileRows; ++m) {
                    _mm_prefetch(
                        reinterpret_cast<const char*>(rows[m] + (g + 1) * group_bytes + prefetch),
                        _MM_HINT_T0);
                }
            }
            unpack_group(w, rows, g + 1, a[cur ^ 1][0], a[cur ^ 1][1]);
        }
        _tile_stored(0, c, 64);
        _tile_stored(1, c + 256, 64);
        _tile_stored(2, c + 512, 64);
        _tile_stored(3, c + 768, 64);
        fold_group(c, _mm512_loadu_ps(unit + g * kTileTokens),
                   _mm512_loadu_ps(sum + g * kTileTokens), rb.scale + g, rb.bias + g, n_groups,
                   acc);
    }
}

}  // namespace

void gemv_rows_amx(const WeightMatrix& w, const AmxActivations& xa, std::int64_t n,
                   std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias, float* y,
                   std::int64_t ldy, float* row_scratch) {
    if (row_end <= row_begin || n <= 0) return;
    const std::int64_t n_groups = w.cols / w.group_size;
    const std::int64_t row_bytes = w.row_bytes();
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    float* scale = row_scratch;
    float* group_bias = row_scratch + kTileRows * n_groups;
    const bool has_bias = bias != nullptr && bias->valid();
    configure_tiles(k_bytes(w));
    for (std::int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
        const std::int64_t rows = std::min(kTileRows, row_end - r0);
        for (std::int64_t m = 0; m < kTileRows; ++m) {
            const std::int64_t r = r0 + std::min(m, rows - 1);
            widen_affine(w.scale_dtype, w.scales, r * n_groups, n_groups, scale + m * n_groups);
            widen_affine(w.scale_dtype, w.biases, r * n_groups, n_groups,
                         group_bias + m * n_groups);
        }
        const RowBlock rb{w, xa, n_groups, scale, group_bias, rows};
        for (std::int64_t tb = 0; tb < amx_token_blocks(n); ++tb) {
            __m512 acc[kTileRows];
            row_block_tokens(rb, base + r0 * row_bytes, row_bytes, tb, acc);
            alignas(64) float out[kTileRows][kTileTokens];
            for (int m = 0; m < kTileRows; ++m) _mm512_store_ps(out[m], acc[m]);
            const std::int64_t tokens = std::min(kTileTokens, n - tb * kTileTokens);
            for (std::int64_t m = 0; m < rows; ++m) {
                const float add = has_bias ? load_scalar(bias->dtype, bias->data, r0 + m) : 0.0f;
                for (std::int64_t t = 0; t < tokens; ++t) {
                    y[(tb * kTileTokens + t) * ldy + r0 + m] = out[m][t] + add;
                }
            }
        }
    }
    _tile_release();
}

HWY_POP_ATTRIBUTES
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else  // !BRIGADE_INT8_X86

bool amx_available() { return false; }
bool amx_bf16_available() { return false; }
bool amx_kernel_supports(const WeightMatrix&) { return false; }
std::int64_t amx_token_blocks(std::int64_t n) { return (n + 15) / 16; }
std::int64_t amx_tile_bytes(const WeightMatrix&, std::int64_t) { return 0; }
std::int64_t amx_staging_bytes(const WeightMatrix&, std::int64_t) { return 0; }
std::int64_t amx_row_scratch_floats(const WeightMatrix&) { return 0; }
void prepare_amx_activations(const WeightMatrix&, const float*, std::int64_t, std::int64_t,
                             std::int64_t, const AmxBuffers&) {}
void gemv_rows_amx(const WeightMatrix&, const AmxActivations&, std::int64_t, std::int64_t,
                   std::int64_t, const WeightVector*, float*, std::int64_t, float*) {}

#endif  // BRIGADE_INT8_X86

}  // namespace brigade::model::cpu
