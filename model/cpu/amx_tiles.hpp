#pragma once
// What the AMX kernels (matmul_amx.cpp, matmul_amx_bf16.cpp) share: the tile configuration
// that LDTILECFG reads (palette 1: up to 16 rows of up to 64 bytes per tile).

#include <hwy/base.h>  // HWY_PUSH_ATTRIBUTES

#include <cstdint>

// The AMX-INT8 kernel's code region (matmul_amx.cpp, matmul_amx_prepare.cpp): AVX-512 with VBMI
// and the tile instructions, and GCC 12's false uninitialized warnings on AVX-512 intrinsics
// silenced (see matmul_split_int8.cpp). Close with BRIGADE_AMX_INT8_REGION_END.
// clang-format off
#if defined(__GNUC__) && !defined(__clang__)
#define BRIGADE_AMX_INT8_GCC_WARNINGS_OFF \
    _Pragma("GCC diagnostic push") \
    _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
    _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define BRIGADE_AMX_INT8_GCC_WARNINGS_ON _Pragma("GCC diagnostic pop")
#else
#define BRIGADE_AMX_INT8_GCC_WARNINGS_OFF
#define BRIGADE_AMX_INT8_GCC_WARNINGS_ON
#endif
#define BRIGADE_AMX_INT8_REGION_BEGIN \
    BRIGADE_AMX_INT8_GCC_WARNINGS_OFF \
    HWY_PUSH_ATTRIBUTES("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vbmi,amx-tile,amx-int8")
#define BRIGADE_AMX_INT8_REGION_END HWY_POP_ATTRIBUTES BRIGADE_AMX_INT8_GCC_WARNINGS_ON
// clang-format on

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

// Tile instructions, tile numbers as template arguments (GCC's _tile_* macros paste theirs into
// the instruction text). The AMX-INT8 kernel uses them throughout, the AMX-BF16 one for its
// stores. AT&T operand order: sources first.
//
// GCC's macros do not tell the compiler which memory a tile load reads or a store writes: to
// the compiler, a store into a buffer that only a later _tile_loadd reads is dead, and a load
// after _tile_stored may be served from before it (the LDTILECFG fault above is this kind of
// bug). tile_load_buffer and tile_store name their 1 KiB (16 rows of 64 bytes) as a memory
// operand, which orders them against the vector code that fills or reads it; a "memory"
// clobber would do it too, but it also made every accumulator of the fold a store.
// tile_load is for memory this code never writes (the weights, activations prepared before the
// call).
using TileBytes = std::uint8_t[1024];
template <int kTile>
inline void tile_zero() {
    asm volatile("tilezero %%tmm%c0" : : "n"(kTile));
}
template <int kTile>
inline void tile_load(const void* base, std::int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride), "n"(kTile));
}
template <int kTile>
inline void tile_load_buffer(const void* base) {
    asm volatile("tileloadd (%1,%2,1), %%tmm%c3"
                 :
                 : "m"(*static_cast<const TileBytes*>(base)), "r"(base), "r"(std::int64_t{64}),
                   "n"(kTile));
}
template <int kTile>
inline void tile_store(void* base) {
    asm volatile("tilestored %%tmm%c3, (%1,%2,1)"
                 : "=m"(*static_cast<TileBytes*>(base))
                 : "r"(base), "r"(std::int64_t{64}), "n"(kTile));
}
// For a tile load from memory that C++ code wrote other than through tile_load_buffer's 1 KiB
// (a zero-padded copy of rows): makes those stores happen before the next tile load. Only for
// memory the compiler must treat as visible elsewhere (a caller's buffer): a local array whose
// address never escapes is not ordered by a "memory" clobber.
inline void publish_tile_data() { asm volatile("" : : : "memory"); }
// C += A · B on unsigned bytes (A) by signed ones (B).
template <int kC, int kA, int kB>
inline void tile_dpbusd() {
    asm volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(kC), "n"(kA), "n"(kB));
}

}  // namespace brigade::model::cpu
