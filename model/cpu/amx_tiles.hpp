#pragma once
// What the AMX kernels (matmul_amx.cpp, matmul_amx_bf16.cpp) share: the tile configuration
// that LDTILECFG reads (palette 1: up to 16 rows of up to 64 bytes per tile).

#include <cstdint>

namespace brigade::model::cpu {

struct AmxTileConfig {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {};  // bytes per row of tile t
    std::uint8_t rows[16] = {};    // rows of tile t
};
static_assert(sizeof(AmxTileConfig) == 64);

// Call right before _tile_loadconfig(&cfg). GCC's _tile_loadconfig reads the 64 bytes through
// its own struct type, so by type-based alias analysis the stores that filled an AmxTileConfig
// may be dropped as dead: an experiment of session 19 (bench/RESULTS.md) got an LDTILECFG of a
// bare palette, and its first tile instruction faulted. The barrier makes the stores happen.
inline void publish_tile_config(const AmxTileConfig& cfg) {
    asm volatile("" : : "r"(&cfg) : "memory");
}

}  // namespace brigade::model::cpu
