// The AMX-INT8 decode kernel's activations (matmul_amx.cpp says why and how): each token split
// into int8 digits by the split-int8 quantizer, then transposed into the B tiles of its token
// block, group by group (amx_layout.hpp), so a batch's digits are those a token alone would get.

#include <array>
#include <cstdint>
#include <cstring>

#include "model/cpu/amx_layout.hpp"
#include "model/cpu/amx_tiles.hpp"  // BRIGADE_AMX_INT8_REGION_BEGIN
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86
#include "model/cpu/matmul_split_int8.hpp"

#if BRIGADE_INT8_X86
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>
#endif

namespace brigade::model::cpu {

bool amx_pairs_groups(const WeightMatrix& w, std::int64_t n, int digits, bool pair_groups) {
    // Two digits of up to 4 tokens: 8 of a narrow block's 16 columns.
    return pair_groups && digits == 2 && n >= 1 && n * digits <= 8 &&
           (w.group_size == 32 || w.group_size == 64) && w.cols % (2 * w.group_size) == 0;
}

#if BRIGADE_INT8_X86

using namespace amx_layout;

std::int64_t amx_token_blocks(std::int64_t n, int digits) {
    const std::int64_t block = layout_of(n, digits).block_tokens;
    return (n + block - 1) / block;
}

std::int64_t amx_tile_bytes(const WeightMatrix& w, std::int64_t n, int digits) {
    return amx_token_blocks(n, digits) * (w.cols / w.group_size) *
           group_tile_bytes(w, layout_of(n, digits));
}

std::int64_t amx_staging_bytes(const WeightMatrix& w, std::int64_t n, int digits) {
    return n * split_int8::token_bytes(w, plan_of(digits));
}

BRIGADE_AMX_INT8_REGION_BEGIN
namespace {

// Byte j of the interleave: even run j / 2 (j even), odd run j / 2 (j odd; index 64 on).
alignas(64) constexpr auto kInterleave = [] {
    std::array<std::uint8_t, 64> index{};
    for (int j = 0; j < 64; ++j) index[j] = static_cast<std::uint8_t>((j % 2) * 64 + j / 2);
    return index;
}();

void prepare_group(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t g,
                   const AmxBuffers& buf) {
    const split_int8::DigitPlan& plan = plan_of(buf.digits);
    const int digits = plan.count;
    const std::int64_t n_groups = w.cols / w.group_size;
    const std::int64_t token_bytes = split_int8::token_bytes(w, plan);
    const std::int64_t group = w.group_size;
    const std::int64_t kb = k_bytes(w);
    const Layout layout = layout_of(w, n, digits, buf.pair_groups, buf.pair_nibbles);
    for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t i = t * n_groups + g;
        split_int8::split_avx512(plan, w, x, i, i + 1, buf.staging, buf.staging_unit,
                                 buf.staging_sum);
        // Paired groups share the lanes of the pair's first one.
        const std::int64_t block =
            t / layout.block_tokens * n_groups + (layout.paired ? g & ~1 : g);
        if (layout.narrow) {
            for (int k = 0; k < digits; ++k) {
                const std::int64_t at =
                    block * 16 + narrow_column(layout, t % layout.block_tokens, k, g);
                buf.unit[at] = buf.staging_unit[i] * digit_weight(plan, k);
                buf.sum[at] = k == 0 ? buf.staging_sum[i] : 0.0f;
            }
        } else {
            buf.unit[block * 16 + t % kTileTokens] = buf.staging_unit[i];
            buf.sum[block * 16 + t % kTileTokens] = buf.staging_sum[i];
        }
    }
    // The group's elements in the staging layout: chunk e / 128, per digit 64 even elements
    // and 64 odd ones. A group of 32 or 64 is a run of group / 2 bytes in each; one of 128 is
    // a whole chunk.
    const std::int64_t first = g * group;
    const std::int64_t chunk_offset = first / split_int8::kChunkElems * plan.chunk_bytes();
    const std::int64_t in_run = first % split_int8::kChunkElems / 2;
    if (layout.nibbles) {
        // A 4-bit pair's two tiles (Layout): the first takes each group's even elements, the
        // second its odd ones, in the group's half of the K bytes (its codes' bytes in the pair)
        // and in the group's columns; zeros in its columns' other half. The other group's
        // columns are its own to write (another thread may be at it).
        const std::int64_t half = kb / 2;
        const std::int64_t parity = g & 1;
        std::int8_t* pair_tiles = buf.tiles + (g & ~std::int64_t{1}) * group_tile_bytes(w, layout);
        for (std::int64_t odd = 0; odd < 2; ++odd) {
            alignas(64) std::uint32_t kv[16][16] = {};
            for (std::int64_t j = parity; j < 16; j += 2) {
                const std::int64_t token = (j >> 1) / digits;
                const std::int64_t k = (j >> 1) % digits;
                if (token >= n) break;
                const std::int8_t* base =
                    buf.staging + token * token_bytes + chunk_offset + k * 128 + odd * 64 + in_run;
                std::memcpy(reinterpret_cast<std::int8_t*>(kv[j]) + parity * half, base,
                            static_cast<std::size_t>(half));
            }
            auto* tile =
                reinterpret_cast<std::uint32_t*>(pair_tiles + odd * group_tile_bytes(w, layout));
            for (std::int64_t q = 0; q < kb / 4; ++q) {
                for (std::int64_t j = parity; j < 16; j += 2) tile[q * 16 + j] = kv[j][q];
            }
        }
        return;
    }
    const std::int64_t tiles_per_step = layout.narrow ? 1 : digits;
    for (std::int64_t tb = 0; tb < amx_token_blocks(n, digits); ++tb) {
        std::int8_t* out = buf.tiles + (tb * n_groups + g) * group_tile_bytes(w, layout);
        for (std::int64_t step = 0; step < steps_of(w); ++step) {
            for (std::int64_t tile_index = 0; tile_index < tiles_per_step; ++tile_index) {
                // The K bytes of each of the tile's 16 columns (zero past n), then their
                // transpose by 4-byte words: word q of column j goes to row q, column j.
                // Column j is token j of the block for digit tile_index (wide), or digit j % D
                // of token j / D (narrow).
                alignas(64) std::uint32_t kv[16][16] = {};
                for (std::int64_t j = 0; j < 16; ++j) {
                    // Paired: this group's columns are those of its parity.
                    if (layout.paired && (j & 1) != (g & 1)) continue;
                    const std::int64_t jj = layout.paired ? j >> 1 : j;
                    const std::int64_t token =
                        tb * layout.block_tokens + (layout.narrow ? jj / digits : jj);
                    const std::int64_t k = layout.narrow ? jj % digits : tile_index;
                    if (token >= n) break;
                    const std::int8_t* base =
                        buf.staging + token * token_bytes + chunk_offset + k * 128 + in_run;
                    auto* dst = reinterpret_cast<std::int8_t*>(kv[j]);
                    if (w.bits == 8) {
                        // 8-bit codes stay in element order (the A tiles are the rows' bytes):
                        // the step's even and odd elements interleaved again.
                        const __mmask64 half = _cvtu64_mask64((1ull << (kb / 2)) - 1);
                        const __m512i even = _mm512_maskz_loadu_epi8(half, base + step * kb / 2);
                        const __m512i odd =
                            _mm512_maskz_loadu_epi8(half, base + 64 + step * kb / 2);
                        _mm512_store_si512(dst,
                                           _mm512_permutex2var_epi8(
                                               even, _mm512_load_si512(kInterleave.data()), odd));
                    } else if (group == 128) {
                        std::memcpy(dst, base + step * 64, 64);
                    } else {
                        std::memcpy(dst, base, static_cast<std::size_t>(group / 2));
                        std::memcpy(dst + group / 2, base + 64,
                                    static_cast<std::size_t>(group / 2));
                    }
                }
                auto* tile = reinterpret_cast<std::uint32_t*>(
                    out + (step * tiles_per_step + tile_index) * kb * 16);
                for (std::int64_t q = 0; q < kb / 4; ++q) {
                    for (std::int64_t j = 0; j < 16; ++j) tile[q * 16 + j] = kv[j][q];
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

BRIGADE_AMX_INT8_REGION_END

#else  // !BRIGADE_INT8_X86

std::int64_t amx_token_blocks(std::int64_t n, int) { return (n + 15) / 16; }
std::int64_t amx_tile_bytes(const WeightMatrix&, std::int64_t, int) { return 0; }
std::int64_t amx_staging_bytes(const WeightMatrix&, std::int64_t, int) { return 0; }
void prepare_amx_activations(const WeightMatrix&, const float*, std::int64_t, std::int64_t,
                             std::int64_t, const AmxBuffers&) {}

#endif  // BRIGADE_INT8_X86

}  // namespace brigade::model::cpu
