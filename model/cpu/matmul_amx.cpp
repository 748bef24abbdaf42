// Decode of 3-31 tokens on MLX affine 4- and 8-bit weights through AMX tile multiplies (Intel
// Xeon from Sapphire Rapids on), with the activations split into int8 digits by the split-int8
// quantizer (matmul_split_int8.cpp): four (split_int8::kAmxDigits, f32-class precision) where
// prompt tokens are among the rows, two (kGemvDigits, the one- and two-token GEMV's) for a
// batch of decode steps (AmxActivations::digits; CpuTuning::amx_decode_two_digits says why).
//
// Why: a batch of decode tokens with f32 activations costs an FMA per weight and token, and the
// weight's decode on top; on the lent 16-vCPU Xeons 4 sequences of Qwen2.5-0.5B q4 decoded only
// 1.4x faster than one, 16 sequences 2.3x (bench/RESULTS.md). One TDPBUSD multiplies a 16x64
// tile of unsigned bytes by a 64x16 tile of signed ones into 16x16 int32 sums: 16,384
// multiply-adds where an AVX-512 FMA does 16.
//
// Per weight group g (32, 64 or 128 columns), 16 rows r and a block of 16 tokens t:
//   A (16 rows x K bytes): the rows' codes of the group, one byte each; 4-bit codes with the
//                          even elements first and odd ones after (how a byte holds them: low
//                          nibble even), 8-bit ones in element order (16 whole rows are loaded
//                          into the tile from the weights as they are);
//   B_k (K/4 x 64 bytes):  digit k of the same elements of the 16 tokens, in the dot-product
//                          layout (B_k[p/4][4t + p%4] = digit k of token t at K position p);
//   C_k = A · B_k          S_k[r][t] = Σ q·d_k over the group, exact in int32;
// and with four digits and unit_tg = step_tg · 2^-17,
//   Σ q·x = unit_tg · (2^11 · (S0·2^6 + S1) + (S2·2^5 + S3))
// (with two, unit_tg = step_tg · 2^-7 and Σ q·x = unit_tg · (S0·2^7 + S1)),
//   y[t][r] += scale_rg · unit_tg · that + bias_rg · Σx_tg.
// K is the group (64 at most per tile; groups of 128 take two tiles into the same sums). The
// D C tiles (D digits) are stored after every group and folded into 16 accumulators (one per
// row, the tokens along the vector) by AVX-512: that fold, ~14 instructions per row and group
// with four digits (8 with two), is the kernel's vector cost, paid once for up to 16 tokens.
// Batches of up to 8 tokens take narrow blocks instead (Layout, amx_layout.hpp): 16 / D tokens x D
// digits in one B tile, one multiply per group and a fold of ~5 instructions per row, each group
// folded while the next one is multiplied; and where 3-4 tokens of two digits fill only half of
// such a block, two groups share it (Layout: paired), folded together.
//
// The digits come from the split-int8 quantizer (split_int8::split_avx512) token by token and
// are then transposed into the B tiles, all tokens of a group at a time, so the batch's digits
// are those a token alone would get (matmul_amx_prepare.cpp).

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/cpu/amx_layout.hpp"
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

using namespace amx_layout;

namespace {

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

std::int64_t amx_row_scratch_floats(const WeightMatrix& w) {
    return 2 * kTileRows * (w.cols / w.group_size);
}

BRIGADE_AMX_INT8_REGION_BEGIN
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
    publish_tile_config(cfg);
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
    if (w.bits == 4 && w.group_size == 64) {
        // The row's 32 bytes in both halves, shifted right by 0 (low half: even elements) and
        // 4 bits (high half: odd ones).
        const __m512i by =
            _mm512_mask_blend_epi64(0xF0, _mm512_setzero_si512(), _mm512_set1_epi16(4));
        for (int m = 0; m < kTileRows; ++m) {
            const __m512i v = _mm512_broadcast_i64x4(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[m] + g * 32)));
            _mm512_store_si512(a0 + m * 64, _mm512_and_si512(_mm512_srlv_epi16(v, by), nibble));
        }
        return;
    }
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
    // 8 bits: the group's bytes as they are (a block of 16 whole rows skips this and loads
    // its A tiles from the rows themselves).
    const std::int64_t bytes = w.group_size;
    const __mmask64 mask = _cvtu64_mask64(bytes >= 64 ? ~0ull : (1ull << bytes) - 1);
    for (int m = 0; m < kTileRows; ++m) {
        const std::uint8_t* p = codes[m] + g * bytes;
        _mm512_store_si512(a0 + m * 64, _mm512_maskz_loadu_epi8(mask, p));
        if (bytes == 128) _mm512_store_si512(a1 + m * 64, _mm512_loadu_si512(p + 64));
    }
}

// The A tiles of a 4-bit pair of groups g, g + 1 (g even; Layout) for 16 rows: the pair's code
// bytes (32 or 64) loaded once per row, their low nibbles (the even elements of both groups)
// a_lo's row, their high ones a_hi's: 3 instructions a row for two groups, where unpack_group
// takes 2 a row for one.
HWY_INLINE void unpack_nibble_pair(const WeightMatrix& w, const std::uint8_t* const* codes,
                                   std::int64_t g, std::uint8_t* a_lo, std::uint8_t* a_hi) {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const std::int64_t bytes = w.group_size;  // two groups of group_size / 2 bytes
    const __mmask64 mask = _cvtu64_mask64(bytes == 64 ? ~0ull : (1ull << bytes) - 1);
    for (int m = 0; m < kTileRows; ++m) {
        const __m512i v = _mm512_maskz_loadu_epi8(mask, codes[m] + g * (w.group_size / 2));
        _mm512_store_si512(a_lo + m * 64, _mm512_and_si512(v, nibble));
        _mm512_store_si512(a_hi + m * 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
    }
}

// One K step of a group for the wide kernel: C_0..C_{D-1} += A (tile kA) · B_0..B_{D-1} (the
// token block's digit tiles at `b`), B tiles rotated through tiles 6 and 7.
template <int D, int kA>
HWY_INLINE void multiply_digits(const std::int8_t* b, std::int64_t tile_bytes) {
    tile_load<6>(b, 64);
    tile_dpbusd<0, kA, 6>();
    tile_load<7>(b + tile_bytes, 64);
    tile_dpbusd<1, kA, 7>();
    if constexpr (D == 4) {
        tile_load<6>(b + 2 * tile_bytes, 64);
        tile_dpbusd<2, kA, 6>();
        tile_load<7>(b + 3 * tile_bytes, 64);
        tile_dpbusd<3, kA, 7>();
    }
}

// C_0..C_{D-1} of one group for 16 rows (A in tiles 4, 5) and the token block's B tiles at `b`.
template <int D>
HWY_INLINE void multiply_group(const std::int8_t* b, std::int64_t steps, std::int64_t tile_bytes) {
    tile_zero<0>();
    tile_zero<1>();
    if constexpr (D == 4) {
        tile_zero<2>();
        tile_zero<3>();
    }
    multiply_digits<D, 4>(b, tile_bytes);
    if (steps == 2) multiply_digits<D, 5>(b + D * tile_bytes, tile_bytes);
}

template <int D>
HWY_INLINE void store_sums(std::int32_t* out) {
    tile_store<0>(out);
    tile_store<1>(out + 256);
    if constexpr (D == 4) {
        tile_store<2>(out + 512);
        tile_store<3>(out + 768);
    }
}

// An A tile: from the unpacked codes (a_stride 64, the 1 KiB buffer unpack_group filled) or
// from the weights themselves (8-bit, a_stride the row bytes).
template <int kTile>
HWY_INLINE void load_codes(const std::uint8_t* a, std::int64_t a_stride) {
    if (a_stride == 64) {
        tile_load_buffer<kTile>(a);
    } else {
        tile_load<kTile>(a, a_stride);
    }
}

// One group's multiply for narrow blocks: C_0 (and C_1) in tiles 0 (1), each narrow block's
// 16 / D tokens x D digits, block k's B tiles at b + k * block_stride; A from a0 (a1: a group's
// second K step) or, for `direct` 8-bit rows, from the weights at stride `a_stride`. (Alternating
// two sets of tiles between consecutive groups, so that a multiply need not wait for the previous
// group's store, made no difference here and was slower for 5-8 tokens on the lent Xeon in
// run 65.)
template <int kBlocks>
HWY_INLINE void multiply_group_narrow(const std::uint8_t* a0, const std::uint8_t* a1,
                                      std::int64_t a_stride, const std::int8_t* b,
                                      std::int64_t block_stride, std::int64_t steps,
                                      std::int64_t tile_bytes) {
    tile_zero<0>();
    if constexpr (kBlocks == 2) tile_zero<1>();
    load_codes<4>(a0, a_stride);
    if (steps == 2) load_codes<5>(a1, a_stride);
    tile_load<6>(b, 64);
    tile_dpbusd<0, 4, 6>();
    if constexpr (kBlocks == 2) {
        tile_load<7>(b + block_stride, 64);
        tile_dpbusd<1, 4, 7>();
    }
    if (steps == 2) {
        tile_load<6>(b + tile_bytes, 64);
        tile_dpbusd<0, 5, 6>();
        if constexpr (kBlocks == 2) {
            tile_load<7>(b + block_stride + tile_bytes, 64);
            tile_dpbusd<1, 5, 7>();
        }
    }
}

template <int kBlocks>
HWY_INLINE void store_sums_narrow(std::int32_t* out) {
    tile_store<0>(out);
    if constexpr (kBlocks == 2) tile_store<1>(out + 256);
}

// One block of up to 16 rows against one block of up to 16 tokens.
struct RowBlock {
    const WeightMatrix& w;
    const AmxActivations& xa;
    std::int64_t n_groups;
    const float* scale;  // [16][n_groups] f32
    const float* bias;   // [16][n_groups] f32
    std::int64_t rows;   // of the block, 1 to 16
    // The codes of the next block of this call's rows (nullptr at the last) and their 64-byte
    // lines, prefetched while this block is multiplied (AmxActivations::prefetch_next_block).
    const std::uint8_t* next_codes;
    std::int64_t next_lines;
};

// acc[m] += row m's part of one group from the sums C_k in `c` (C_k[m] at c + k * 256 + m * 16).
template <int D>
HWY_INLINE void fold_group(const std::int32_t* c, __m512 unit_g, __m512 sum_g, const float* scale,
                           const float* bias, std::int64_t stride, __m512* acc) {
#pragma GCC unroll 16
    for (int m = 0; m < kTileRows; ++m) {
        const __m512i s0 = _mm512_load_si512(c + m * 16);
        const __m512i s1 = _mm512_load_si512(c + 256 + m * 16);
        __m512 v;
        if constexpr (D == 4) {
            const __m512i s2 = _mm512_load_si512(c + 512 + m * 16);
            const __m512i s3 = _mm512_load_si512(c + 768 + m * 16);
            const __m512i high = _mm512_add_epi32(_mm512_slli_epi32(s0, 6), s1);
            const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(s2, 5), s3);
            v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(2048.0f),
                                _mm512_cvtepi32_ps(low));
        } else {
            // |S0·2^7 + S1| <= 2^7 · 128 · 255 · 127 + ...: exact in int32.
            v = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(s0, 7), s1));
        }
        acc[m] =
            _mm512_fmadd_ps(_mm512_mul_ps(v, unit_g), _mm512_set1_ps(scale[m * stride]), acc[m]);
        acc[m] = _mm512_fmadd_ps(sum_g, _mm512_set1_ps(bias[m * stride]), acc[m]);
    }
}

// p[0], p[1], p[0], p[1], ... (a function: a lambda would not take this region's target
// attributes).
HWY_INLINE __m512 broadcast_pair(const float* p) {
    double two;
    std::memcpy(&two, p, sizeof two);
    return _mm512_castpd_ps(_mm512_set1_pd(two));
}

// The same for a narrow block: C[m] lane D·t + k is S_k of token t, and `unit_g` carries each
// lane's digit weight, `sum_g` the tokens' sums in lanes D·t. kPair: a paired block (Layout),
// C[m]'s even lanes group g's and its odd ones group g + 1's, as are those of unit_g and sum_g;
// one 64-bit broadcast gives each lane its group's scale (bias): ~4 instructions per row for two
// groups.
template <bool kPair>
HWY_INLINE void fold_group_narrow(const std::int32_t* c, __m512 unit_g, __m512 sum_g,
                                  const float* scale, const float* bias, std::int64_t stride,
                                  __m512* acc) {
#pragma GCC unroll 16
    for (int m = 0; m < kTileRows; ++m) {
        const float* s = scale + m * stride;
        const float* b = bias + m * stride;
        const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + m * 16)), unit_g);
        acc[m] = _mm512_fmadd_ps(v, kPair ? broadcast_pair(s) : _mm512_set1_ps(*s), acc[m]);
        acc[m] = _mm512_fmadd_ps(sum_g, kPair ? broadcast_pair(b) : _mm512_set1_ps(*b), acc[m]);
    }
}

// C_0 of groups g and g + 1 of a paired narrow block: A tiles 4 and 5 (from a0 and a1, or the
// weights at a_stride), B tiles 6 and 7 (the groups' at b and b + b_stride).
HWY_INLINE void multiply_group_pair(const std::uint8_t* a0, const std::uint8_t* a1,
                                    std::int64_t a_stride, const std::int8_t* b,
                                    std::int64_t b_stride) {
    tile_zero<0>();
    load_codes<4>(a0, a_stride);
    load_codes<5>(a1, a_stride);
    tile_load<6>(b, 64);
    tile_dpbusd<0, 4, 6>();
    tile_load<7>(b + b_stride, 64);
    tile_dpbusd<0, 5, 7>();
}

// acc[16k + m] (block tb + k's 16 lanes) = row m · x for kBlocks token blocks (2 only for
// narrow ones: both take each group's A tiles). Each group's codes are unpacked while the tile
// unit multiplies the previous group's, and the sums are folded after. kPaired: a paired narrow
// block (Layout), two groups per multiply and fold.
template <int D, bool kNarrow, int kBlocks, bool kPaired = false>
HWY_INLINE void row_block_tokens(const RowBlock& rb, const std::uint8_t* codes,
                                 std::int64_t row_bytes, std::int64_t tb, __m512* acc_out) {
    static_assert(kBlocks == 1 || (kNarrow && kBlocks == 2));
    static_assert(!kPaired || (kNarrow && kBlocks == 1 && D == 2));
    const WeightMatrix& w = rb.w;
    const std::int64_t n_groups = rb.n_groups;
    const std::int64_t kb = k_bytes(w);
    const std::int64_t steps = steps_of(w);
    const std::int64_t tile_bytes = kb * 16;
    const std::int64_t group_bytes = w.group_size * w.bits / 8;
    const std::int64_t b_stride =
        group_tile_bytes(w, Layout{kNarrow, kNarrow ? kTileTokens / D : kTileTokens, D});
    alignas(64) std::uint8_t a[2][2][kTileRows * 64];
    // The C tiles' sums (narrow: one per block; wide: one per digit), for two groups: narrow
    // blocks fold one while the next is made.
    constexpr std::int64_t kSums = (kNarrow ? kBlocks : D) * kTileRows * kTileTokens;
    alignas(64) std::int32_t c[2 * kSums];
    const std::int8_t* b = rb.xa.tiles + tb * n_groups * b_stride;
    const float* unit = rb.xa.unit + tb * n_groups * kTileTokens;
    const float* sum = rb.xa.sum + tb * n_groups * kTileTokens;
    const std::int64_t block_stride = n_groups * b_stride;  // B tiles
    const std::int64_t lane_stride = n_groups * 16;         // units and sums
    // Local sums: acc_out may alias the scales the fold reads (__m512 may alias anything), so
    // with it every FMA of the fold stored its accumulator. GCC 12 still keeps these on the
    // stack, but stores each once per row and group.
    __m512 acc[kBlocks * kTileRows];
#pragma GCC unroll 32
    for (int m = 0; m < kBlocks * kTileRows; ++m) acc[m] = _mm512_setzero_ps();
    // Rows past the block's end repeat its last row (their sums are dropped).
    const std::uint8_t* rows[kTileRows];
    for (int m = 0; m < kTileRows; ++m)
        rows[m] = codes + std::min<std::int64_t>(m, rb.rows - 1) * row_bytes;
    // The first token block streams the codes in; further ones find them in cache.
    const std::int64_t prefetch = tb == 0 && !rb.xa.prefetch_next_block ? rb.xa.prefetch_bytes : 0;
    const std::uint8_t* next_codes = tb == 0 ? rb.next_codes : nullptr;
    const std::int64_t next_lines_per_group = (rb.next_lines + n_groups - 1) / n_groups;
    const auto fold = [&](std::int64_t g, const std::int32_t* sums) {
        const __m512 unit_g = _mm512_loadu_ps(unit + g * 16);
        const __m512 sum_g = _mm512_loadu_ps(sum + g * 16);
        if constexpr (kPaired) {
            fold_group_narrow<true>(sums, unit_g, sum_g, rb.scale + g, rb.bias + g, n_groups, acc);
        } else if constexpr (kNarrow) {
            fold_group_narrow<false>(sums, unit_g, sum_g, rb.scale + g, rb.bias + g, n_groups, acc);
            if constexpr (kBlocks == 2) {
                fold_group_narrow<false>(sums + 256, _mm512_loadu_ps(unit + lane_stride + g * 16),
                                         _mm512_loadu_ps(sum + lane_stride + g * 16), rb.scale + g,
                                         rb.bias + g, n_groups, acc + kTileRows);
            }
        } else {
            fold_group<D>(sums, unit_g, sum_g, rb.scale + g, rb.bias + g, n_groups, acc);
        }
    };
    // 8-bit codes of 16 whole rows are the A tiles as they are.
    const bool direct = w.bits == 8 && rb.rows == kTileRows;
    if (!direct && !kPaired) unpack_group(w, rows, 0, a[0][0], a[0][1]);
    // The work of group g + 1 while group g is multiplied: its codes unpacked, and the
    // prefetch: a group's share of the next block's lines, or (without that) each row's codes
    // prefetch_bytes ahead.
    const auto prefetch_ahead = [&](std::int64_t g) {
        if (next_codes != nullptr) {
            const std::int64_t end = std::min(rb.next_lines, (g + 1) * next_lines_per_group);
            for (std::int64_t line = g * next_lines_per_group; line < end; ++line) {
                _mm_prefetch(reinterpret_cast<const char*>(next_codes + line * 64), _MM_HINT_T0);
            }
        }
        if (g + 1 >= n_groups) return;
        if (prefetch > 0 && ((g + 1) * group_bytes) % 64 == 0) {
            for (int m = 0; m < kTileRows; ++m) {
                _mm_prefetch(
                    reinterpret_cast<const char*>(rows[m] + (g + 1) * group_bytes + prefetch),
                    _MM_HINT_T0);
            }
        }
    };
    const auto prepare_next = [&](std::int64_t g, int cur) {
        prefetch_ahead(g);
        if (!direct && g + 1 < n_groups) unpack_group(w, rows, g + 1, a[cur ^ 1][0], a[cur ^ 1][1]);
    };
    if constexpr (kPaired) {
        // Pairs g, g + 1 (A tiles from a[cur][0] and a[cur][1]) while the previous pair is
        // folded. 4-bit with pair_nibbles: the pair's low and high nibbles (Layout); otherwise
        // each group's codes (one K step each, so an unpack writes only its first buffer).
        const auto unpack_pair = [&](std::int64_t g, int into) {
            if (rb.xa.pair_nibbles && w.bits == 4) {
                unpack_nibble_pair(w, rows, g, a[into][0], a[into][1]);
            } else {
                unpack_group(w, rows, g, a[into][0], a[into][0]);
                unpack_group(w, rows, g + 1, a[into][1], a[into][1]);
            }
        };
        if (!direct) unpack_pair(0, 0);
        for (std::int64_t g = 0; g < n_groups; g += 2) {
            const int cur = static_cast<int>((g >> 1) & 1);
            const std::uint8_t* a0 = direct ? codes + g * group_bytes : a[cur][0];
            const std::uint8_t* a1 = direct ? a0 + group_bytes : a[cur][1];
            multiply_group_pair(a0, a1, direct ? row_bytes : 64, b + g * b_stride, b_stride);
            prefetch_ahead(g);
            prefetch_ahead(g + 1);
            if (!direct && g + 2 < n_groups) unpack_pair(g + 2, cur ^ 1);
            if (g > 0) fold(g - 2, c + (cur ^ 1) * kSums);
            store_sums_narrow<1>(c + cur * kSums);
        }
        fold(n_groups - 2, c + (((n_groups - 2) >> 1) & 1) * kSums);
#pragma GCC unroll 32
        for (int m = 0; m < kTileRows; ++m) acc_out[m] = acc[m];
        return;
    }
    if constexpr (kNarrow) {
        // Fold the previous group's sums, stored an iteration ago, while these are made (12%
        // faster here, one thread).
        for (std::int64_t g = 0; g < n_groups; ++g) {
            const int cur = static_cast<int>(g & 1);
            const std::uint8_t* a0 = direct ? codes + g * group_bytes : a[cur][0];
            const std::uint8_t* a1 = direct ? a0 + 64 : a[cur][1];
            multiply_group_narrow<kBlocks>(a0, a1, direct ? row_bytes : 64, b + g * b_stride,
                                           block_stride, steps, tile_bytes);
            prepare_next(g, cur);
            if (g > 0) fold(g - 1, c + (cur ^ 1) * kSums);
            store_sums_narrow<kBlocks>(c + cur * kSums);
        }
        fold(n_groups - 1, c + ((n_groups - 1) & 1) * kSums);
#pragma GCC unroll 32
        for (int m = 0; m < kBlocks * kTileRows; ++m) acc_out[m] = acc[m];
        return;
    }
    for (std::int64_t g = 0; g < n_groups; ++g) {
        const int cur = static_cast<int>(g & 1);
        if (direct) {
            tile_load<4>(codes + g * group_bytes, row_bytes);
            if (steps == 2) tile_load<5>(codes + g * group_bytes + 64, row_bytes);
        } else {
            tile_load_buffer<4>(a[cur][0]);
            if (steps == 2) tile_load_buffer<5>(a[cur][1]);
        }
        multiply_group<D>(b + g * b_stride, steps, tile_bytes);
        prepare_next(g, cur);
        // Wide blocks fold their own group at once: overlapped they were 0-12% slower on the
        // lent 16-vCPU Xeon (run 51).
        std::int32_t* out = c + cur * kSums;
        store_sums<D>(out);
        fold(g, out);
    }
#pragma GCC unroll 32
    for (int m = 0; m < kBlocks * kTileRows; ++m) acc_out[m] = acc[m];
}

}  // namespace

namespace {

// rows_of[t] (lane m: row m) = the sum of token t's 4 lanes (4t .. 4t + 3) of acc[m], for 16
// rows of a narrow block of 4 tokens x 4 lanes: per 4 rows, two interleave rounds leave each
// 128-bit block (a token) holding the rows' sums side by side, (l0 + l2) + (l1 + l3); then a
// transpose of the 4 x 4 blocks. Each row's sums involve no other row.
HWY_INLINE void token_rows_4x4(const __m512* acc, __m512 (&rows_of)[4]) {
    __m512 quad[4];  // quad[q] block t: token t's rows 4q .. 4q + 3
    for (int q = 0; q < 4; ++q) {
        const __m512 a = acc[4 * q], b = acc[4 * q + 1], c = acc[4 * q + 2], d = acc[4 * q + 3];
        // [a0 + a2, b0 + b2, a1 + a3, b1 + b3] per block, and the same for c, d.
        const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
        const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
        quad[q] = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    const __m512 lo01 = _mm512_shuffle_f32x4(quad[0], quad[1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi01 = _mm512_shuffle_f32x4(quad[0], quad[1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 lo23 = _mm512_shuffle_f32x4(quad[2], quad[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi23 = _mm512_shuffle_f32x4(quad[2], quad[3], _MM_SHUFFLE(3, 2, 3, 2));
    rows_of[0] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0));
    rows_of[1] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1));
    rows_of[2] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0));
    rows_of[3] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1));
}

// v[l] = lane l of the 16 vectors v[0..15] (a 16 x 16 transpose of floats): interleaves of
// rows, of row pairs, then a 4 x 4 transpose of 128-bit blocks, 64 shuffles.
HWY_INLINE void transpose_16x16(__m512 (&v)[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    // u[4i + j], block k: element 4k + j of rows 4i .. 4i + 3.
    __m512 u[16];
    for (int i = 0; i < 4; ++i) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int j = 0; j < 4; ++j) {
        const __m512 lo01 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi01 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 lo23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
        v[j] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0));
        v[4 + j] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1));
        v[8 + j] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0));
        v[12 + j] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

template <int D>
void gemv_rows_amx_digits(const WeightMatrix& w, const AmxActivations& xa, std::int64_t n,
                          std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                          float* y, std::int64_t ldy, float* row_scratch) {
    const std::int64_t n_groups = w.cols / w.group_size;
    const std::int64_t row_bytes = w.row_bytes();
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    float* scale = row_scratch;
    float* group_bias = row_scratch + kTileRows * n_groups;
    const bool has_bias = bias != nullptr && bias->valid();
    const Layout layout = layout_of(w, n, D, xa.pair_groups, xa.pair_nibbles);
    configure_tiles(k_bytes(w));
    for (std::int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
        const std::int64_t rows = std::min(kTileRows, row_end - r0);
        if (rows == kTileRows) {
            // 16 whole rows: their scales (and biases) are one run of 16 x n_groups, widened in
            // one call. Row by row (32 calls of 14 groups for Qwen2.5-0.5B) this took 9% of a
            // 4-token matmul here.
            widen_affine(w.scale_dtype, w.scales, r0 * n_groups, kTileRows * n_groups, scale);
            widen_affine(w.scale_dtype, w.biases, r0 * n_groups, kTileRows * n_groups, group_bias);
        } else {
            for (std::int64_t m = 0; m < kTileRows; ++m) {
                const std::int64_t r = r0 + std::min(m, rows - 1);
                widen_affine(w.scale_dtype, w.scales, r * n_groups, n_groups, scale + m * n_groups);
                widen_affine(w.scale_dtype, w.biases, r * n_groups, n_groups,
                             group_bias + m * n_groups);
            }
        }
        const std::int64_t next_rows = std::min(kTileRows, row_end - (r0 + kTileRows));
        const RowBlock rb{
            w,
            xa,
            n_groups,
            scale,
            group_bias,
            rows,
            xa.prefetch_next_block && next_rows > 0 ? base + (r0 + kTileRows) * row_bytes : nullptr,
            next_rows > 0 ? (next_rows * row_bytes + 63) / 64 : 0};
        // The rows' biases (0 without: value + 0 keeps -0 as +0, as a scalar add did).
        alignas(64) float row_bias_values[kTileRows] = {};
        if (has_bias) {
            for (std::int64_t m = 0; m < rows; ++m) {
                row_bias_values[m] = load_scalar(bias->dtype, bias->data, r0 + m);
            }
        }
        const __m512 row_bias = _mm512_load_ps(row_bias_values);
        const std::int64_t blocks = amx_token_blocks(n, D);
        for (std::int64_t tb = 0; tb < blocks;) {
            // Narrow blocks two at a time where there are two.
            __m512 acc[2 * kTileRows];
            const std::int64_t taken = layout.narrow && tb + 1 < blocks ? 2 : 1;
            const std::uint8_t* codes = base + r0 * row_bytes;
            if (!layout.narrow) {
                row_block_tokens<D, false, 1>(rb, codes, row_bytes, tb, acc);
            } else if (layout.paired) {
                if constexpr (D == 2)
                    row_block_tokens<D, true, 1, true>(rb, codes, row_bytes, tb, acc);
            } else if (taken == 2) {
                row_block_tokens<D, true, 2>(rb, codes, row_bytes, tb, acc);
            } else {
                row_block_tokens<D, true, 1>(rb, codes, row_bytes, tb, acc);
            }
            // Each token's 16 rows leave as one vector, from registers: row by row and token
            // by token this was 13-20% of a 4-token matmul here, and gathers from a stored copy
            // a further 13% of a paired block on the lent Xeon (run 130, one thread). Blocks of
            // 4 tokens x 4 lanes (four digits, or two digits x two groups where paired) are
            // summed and transposed by 4 x 4 (token_rows_4x4).
            const std::int64_t token_lanes = layout.narrow ? narrow_token_lanes(layout) : 1;
            const __mmask16 row_mask = _cvtu32_mask16((1u << rows) - 1u);
            if (token_lanes == 4) {
                for (std::int64_t k = 0; k < taken; ++k, ++tb) {
                    const std::int64_t first = tb * layout.block_tokens;
                    const std::int64_t tokens = std::min(layout.block_tokens, n - first);
                    __m512 rows_of[4];
                    token_rows_4x4(acc + k * kTileRows, rows_of);
                    for (std::int64_t t = 0; t < tokens; ++t) {
                        _mm512_mask_storeu_ps(y + (first + t) * ldy + r0, row_mask,
                                              _mm512_add_ps(rows_of[t], row_bias));
                    }
                }
                continue;
            }
            // Otherwise lane pairs summed (narrow), then a transpose: lane l of the 16 rows as
            // one vector per lane, token t's at lanes · t (gathers of a stored copy gave the same
            // floats and waited on its stores: 8-bit x6-x8 3-13% slower, run 138).
            for (std::int64_t k = 0; k < taken; ++k, ++tb) {
                const std::int64_t first = tb * layout.block_tokens;
                const std::int64_t tokens = std::min(layout.block_tokens, n - first);
                __m512 lanes[kTileRows];
                for (int m = 0; m < kTileRows; ++m) {
                    __m512 v = acc[k * kTileRows + m];
                    if (layout.narrow) {
                        // Within each token's 2 lanes: lane 0 <- l0 + l1.
                        v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(3, 3, 3, 1)));
                    }
                    lanes[m] = v;
                }
                transpose_16x16(lanes);
                for (std::int64_t t = 0; t < tokens; ++t) {
                    _mm512_mask_storeu_ps(y + (first + t) * ldy + r0, row_mask,
                                          _mm512_add_ps(lanes[token_lanes * t], row_bias));
                }
            }
        }
    }
    _tile_release();
}

}  // namespace

void gemv_rows_amx(const WeightMatrix& w, const AmxActivations& xa, std::int64_t n,
                   std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias, float* y,
                   std::int64_t ldy, float* row_scratch) {
    if (row_end <= row_begin || n <= 0) return;
    if (xa.digits == 2) {
        gemv_rows_amx_digits<2>(w, xa, n, row_begin, row_end, bias, y, ldy, row_scratch);
    } else {
        gemv_rows_amx_digits<4>(w, xa, n, row_begin, row_end, bias, y, ldy, row_scratch);
    }
}

BRIGADE_AMX_INT8_REGION_END

#else  // !BRIGADE_INT8_X86

bool amx_available() { return false; }
bool amx_bf16_available() { return false; }
bool amx_kernel_supports(const WeightMatrix&) { return false; }
std::int64_t amx_row_scratch_floats(const WeightMatrix&) { return 0; }
void gemv_rows_amx(const WeightMatrix&, const AmxActivations&, std::int64_t, std::int64_t,
                   std::int64_t, const WeightVector*, float*, std::int64_t, float*) {}

#endif  // BRIGADE_INT8_X86

}  // namespace brigade::model::cpu
