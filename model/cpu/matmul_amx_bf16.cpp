// Decode batches and prompts on BF16 weights through AMX-BF16 tiles (Xeon from Sapphire
// Rapids on): TDPBF16PS multiplies a 16x32 tile of bf16 weights by a 32x16 tile of bf16
// activations into 16x16 f32 sums, 8,192 multiply-adds where an AVX-512 FMA does 16.
//
// Each activation is split into three bf16 terms, x = b0 + b1 + b2 with b0 = bf16(x),
// b1 = bf16(x - b0), b2 = bf16(x - b0 - b1) (round to nearest), which leaves |x - b0 - b1 - b2|
// <= 2^-27 |x|: below f32's own rounding. Products of two bf16 are exact in f32, so the tiles
// compute W·b0 + W·b1 + W·b2 with f32 accumulation, the precision class of the f32 kernels.
// (The tile unit treats subnormal inputs as zero: a term below 2^-126 is lost, which against
// the term above it is nothing.)
//
// Unlike the int8 tiles (matmul_amx.cpp) nothing depends on a weight group, so the sums stay
// in the tile accumulators over the whole row: the weights are read in place, 32 columns of 16
// rows a tile, and two row tiles share each activation tile.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/cpu/amx_tiles.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86
#include "model/cpu/weight_decode.hpp"

#if BRIGADE_INT8_X86
#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES
#include <immintrin.h>
#endif

namespace brigade::model::cpu {

namespace {
constexpr std::int64_t kTokens = 16;  // a tile's tokens (columns of B and C)
constexpr std::int64_t kRows = 16;    // a tile's weight rows
constexpr std::int64_t kStep = 32;    // columns a tile multiply takes
constexpr std::int64_t kTerms = 3;    // bf16 terms per activation
constexpr std::int64_t kTileBytes = 1024;
std::int64_t n_steps(const WeightMatrix& w) { return w.cols / kStep; }
// Blocks of 16 tokens always (the int8 kernel's amx_token_blocks has narrow ones too).
std::int64_t token_blocks(std::int64_t n) { return (n + kTokens - 1) / kTokens; }
}  // namespace

bool amx_bf16_kernel_supports(const WeightMatrix& w) {
    return !w.quantized() && w.dtype == DType::kBF16 && w.cols % kStep == 0 && w.cols > 0 &&
           amx_bf16_available();
}

std::int64_t amx_bf16_row_scratch_floats(const WeightMatrix& w) {
    return kRows * w.row_bytes() / static_cast<std::int64_t>(sizeof(float));
}

std::int64_t amx_bf16_tile_bytes(const WeightMatrix& w, std::int64_t n) {
    return token_blocks(n) * n_steps(w) * kTerms * kTileBytes;
}

#if BRIGADE_INT8_X86

namespace {

std::uint16_t bf16_nearest(float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7F800000u) == 0x7F800000u) return static_cast<std::uint16_t>(u >> 16);  // inf, NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
}

float bf16_value(std::uint16_t h) {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f = 0.0f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

}  // namespace

void prepare_amx_bf16_activations(const WeightMatrix& w, const float* x, std::int64_t n,
                                  std::int64_t step_begin, std::int64_t step_end,
                                  std::uint16_t* tiles) {
    const std::int64_t steps = n_steps(w);
    constexpr std::int64_t kHalves = kTileBytes / 2;
    for (std::int64_t tb = 0; tb < token_blocks(n); ++tb) {
        for (std::int64_t s = step_begin; s < step_end; ++s) {
            std::uint16_t* b = tiles + (tb * steps + s) * kTerms * kHalves;
            std::fill(b, b + kTerms * kHalves, std::uint16_t{0});
            for (std::int64_t t = 0; t < kTokens; ++t) {
                const std::int64_t token = tb * kTokens + t;
                if (token >= n) break;
                const float* xs = x + token * w.cols + s * kStep;
                for (std::int64_t k = 0; k < kStep; ++k) {
                    // B[k / 2][2t + k % 2] of each term's tile.
                    const std::int64_t at = (k / 2) * 2 * kTokens + 2 * t + k % 2;
                    float r = xs[k];
                    for (std::int64_t j = 0; j < kTerms; ++j) {
                        const std::uint16_t h = bf16_nearest(r);
                        b[j * kHalves + at] = h;
                        r -= bf16_value(h);
                    }
                }
            }
        }
    }
}

HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")
namespace {

// Tiles 0, 1: the sums of two row tiles (16 rows x 16 tokens f32); 2, 3: their weights (16 rows
// x 32 bf16); 4-6: the activations' three terms (16 column pairs x 16 tokens x 2 bf16).
void configure_tiles() {
    alignas(64) AmxTileConfig cfg;
    for (int t = 0; t < 7; ++t) {
        cfg.rows[t] = kRows;
        cfg.colsb[t] = 64;
    }
    publish_tile_config(cfg);
    _tile_loadconfig(&cfg);
}

// y rows r0 .. r0 + rows (up to 32 when `pair`, else 16) of token block tb. `a0`, `a1`: the two
// row tiles' first weights and their stride (a short last tile is read from a zero-padded copy).
struct Block {
    const std::uint8_t* a0;
    std::int64_t stride0;
    const std::uint8_t* a1;
    std::int64_t stride1;
    bool pair;
};

HWY_INLINE void multiply_rows(const Block& blk, const std::uint16_t* b, std::int64_t steps,
                              std::int64_t prefetch, float* out) {
    _tile_zero(0);
    _tile_zero(1);
    for (std::int64_t s = 0; s < steps; ++s) {
        if (prefetch > 0) {
            for (int m = 0; m < kRows; ++m) {
                _mm_prefetch(
                    reinterpret_cast<const char*>(blk.a0 + m * blk.stride0 + s * 64 + prefetch),
                    _MM_HINT_T0);
            }
            if (blk.pair) {
                for (int m = 0; m < kRows; ++m) {
                    _mm_prefetch(
                        reinterpret_cast<const char*>(blk.a1 + m * blk.stride1 + s * 64 + prefetch),
                        _MM_HINT_T0);
                }
            }
        }
        const std::uint16_t* bs = b + s * kTerms * (kTileBytes / 2);
        _tile_loadd(2, blk.a0 + s * 64, blk.stride0);
        _tile_loadd(4, bs, 64);
        _tile_loadd(5, bs + 512, 64);
        _tile_loadd(6, bs + 1024, 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(0, 2, 5);
        _tile_dpbf16ps(0, 2, 6);
        if (blk.pair) {
            _tile_loadd(3, blk.a1 + s * 64, blk.stride1);
            _tile_dpbf16ps(1, 3, 4);
            _tile_dpbf16ps(1, 3, 5);
            _tile_dpbf16ps(1, 3, 6);
        }
    }
    // Through tile_store, so that the compiler knows `out` is written (amx_tiles.hpp).
    tile_store<0>(out);
    if (blk.pair) tile_store<1>(out + kRows * kTokens);
}

}  // namespace

void gemv_rows_amx_bf16(const WeightMatrix& w, const std::uint16_t* tiles, std::int64_t n,
                        std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                        float* y, std::int64_t ldy, std::int64_t prefetch_bytes,
                        float* row_scratch) {
    if (row_end <= row_begin || n <= 0) return;
    const std::int64_t steps = n_steps(w);
    const std::int64_t row_bytes = w.row_bytes();
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const bool has_bias = bias != nullptr && bias->valid();
    configure_tiles();
    for (std::int64_t r0 = row_begin; r0 < row_end;) {
        const std::int64_t left = row_end - r0;
        Block blk{base + r0 * row_bytes, row_bytes, base + (r0 + kRows) * row_bytes, row_bytes,
                  left >= 2 * kRows};
        std::int64_t rows = blk.pair ? 2 * kRows : std::min(kRows, left);
        if (rows < kRows) {
            // A short last row tile: a tile load reads 16 rows, so from a zero-padded copy.
            auto* padded = reinterpret_cast<std::uint8_t*>(row_scratch);
            std::memset(padded, 0, static_cast<std::size_t>(kRows * row_bytes));
            std::memcpy(padded, base + r0 * row_bytes, static_cast<std::size_t>(rows * row_bytes));
            publish_tile_data();
            blk.a0 = padded;
        }
        for (std::int64_t tb = 0; tb < token_blocks(n); ++tb) {
            alignas(64) float out[2 * kRows * kTokens];
            multiply_rows(blk, tiles + tb * steps * kTerms * (kTileBytes / 2), steps,
                          rows < kRows ? 0 : prefetch_bytes, out);
            const std::int64_t tokens = std::min(kTokens, n - tb * kTokens);
            for (std::int64_t m = 0; m < rows; ++m) {
                const float add = has_bias ? load_scalar(bias->dtype, bias->data, r0 + m) : 0.0f;
                for (std::int64_t t = 0; t < tokens; ++t) {
                    y[(tb * kTokens + t) * ldy + r0 + m] = out[m * kTokens + t] + add;
                }
            }
        }
        r0 += rows;
    }
    _tile_release();
}

HWY_POP_ATTRIBUTES

#else  // !BRIGADE_INT8_X86

void prepare_amx_bf16_activations(const WeightMatrix&, const float*, std::int64_t, std::int64_t,
                                  std::int64_t, std::uint16_t*) {}
void gemv_rows_amx_bf16(const WeightMatrix&, const std::uint16_t*, std::int64_t, std::int64_t,
                        std::int64_t, const WeightVector*, float*, std::int64_t, std::int64_t,
                        float*) {}

#endif

}  // namespace brigade::model::cpu
