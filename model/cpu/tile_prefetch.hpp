#pragma once
// Software prefetch for the decode kernels' row tiles, shared by the Highway kernel files
// (through decode-inl.hpp) and the plain x86 ones.

#include <hwy/cache_control.h>

#include <cstdint>

namespace brigade::model::cpu {

// Software prefetch for a tile of R rows read side by side. Row i's stream goes on R rows
// later (the rows in between are the tile's own streams), so a prefetch that runs past the end
// of its row skips R - 1 rows for every row boundary it crosses. The distance per stream is half
// that of one row, so a thread keeps about twice a single row's bytes in flight, not R times.
// Measured on the device (kernels_bench, two runs, 1 KiB against 2 KiB per stream): at or above
// on 20 of 21 q4/q8 shapes, q4 by 0-18%; below on one (q8 896x896).
template <int R>
class TilePrefetch {
public:
    TilePrefetch(std::int64_t prefetch_bytes, std::int64_t row_bytes)
        : distance_(prefetch_bytes / 2), row_bytes_(row_bytes), wrap_(row_bytes) {}
    // Prefetches for every row of the tile while it reads byte `at` of its row (calls come in
    // increasing `at`).
    inline void ahead_of(const std::uint8_t* const* rows, std::int64_t at) {
        if (distance_ <= 0) return;
        const std::int64_t ahead = at + distance_;
        while (ahead >= wrap_) {
            wrap_ += row_bytes_;
            skip_ += (R - 1) * row_bytes_;
        }
        for (int i = 0; i < R; ++i) hwy::Prefetch(rows[i] + ahead + skip_);
    }

private:
    std::int64_t distance_;
    std::int64_t row_bytes_;
    std::int64_t wrap_;      // stream offset where the next row boundary lies
    std::int64_t skip_ = 0;  // bytes of the tile's other rows skipped so far
};

}  // namespace brigade::model::cpu
