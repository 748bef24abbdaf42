#pragma once
// Software prefetch for the decode kernels' row tiles, shared by the Highway kernel files
// (through decode-inl.hpp) and the plain x86 ones.

#include <hwy/cache_control.h>

#include <algorithm>
#include <cstdint>

namespace brigade::model::cpu {

inline constexpr std::int64_t kPrefetchLineBytes = 64;
// The most bytes of a row a tile reads between two calls of TilePrefetch::ahead_of: one group
// of 128 8-bit codes.
inline constexpr std::int64_t kMaxPrefetchStepBytes = 128;

// How many lines of the next tile (`rows` rows of row_bytes, counted from its first byte) are
// to have been asked for once a tile reads byte `at` of its rows: the share of the next tile
// that matches what this one will have read one step on, so that at the tile's last call
// (`at` within one step of the row's end) every line of the next tile has been asked for.
inline constexpr std::int64_t next_tile_lines_due(int rows, std::int64_t row_bytes,
                                                  std::int64_t at) {
    const std::int64_t lines = (rows * row_bytes + kPrefetchLineBytes - 1) / kPrefetchLineBytes;
    return std::min(lines, (at + kMaxPrefetchStepBytes) * rows / kPrefetchLineBytes);
}

// Software prefetch for a tile of R rows read side by side. Row i's stream goes on R rows
// later (the rows in between are the tile's own streams), so a prefetch that runs past the end
// of its row skips R - 1 rows for every row boundary it crosses. The distance per stream is half
// that of one row, so a thread keeps about twice a single row's bytes in flight, not R times.
// Measured on the device (kernels_bench, two runs, 1 KiB against 2 KiB per stream): at or above
// on 20 of 21 q4/q8 shapes, q4 by 0-18%; below on one (q8 896x896).
//
// Rows of at most `next_tile_max_row_bytes` (CpuTuning::next_tile_prefetch_row_bytes) instead
// prefetch the next tile: the tile's rows are one contiguous run of R · row_bytes, and each
// call asks for the next run's lines in order, in step with the bytes the tile has read, so
// the prefetches form one sequential stream a tile ahead (the next tile's rows may lie past
// the caller's last row: a prefetch is only a hint, it never faults). On an AMD Zen 4 the
// per-row streams of short rows read from memory at about half the speed of one row at a time;
// this stream reads them at the speed of one row (bench/RESULTS.md, session 23).
template <int R>
class TilePrefetch {
public:
    TilePrefetch(std::int64_t prefetch_bytes, std::int64_t row_bytes,
                 std::int64_t next_tile_max_row_bytes = 0)
        : distance_(prefetch_bytes / 2),
          row_bytes_(row_bytes),
          wrap_(row_bytes),
          next_tile_(R > 1 && prefetch_bytes > 0 && row_bytes <= next_tile_max_row_bytes) {}
    // Prefetches for every row of the tile while it reads byte `at` of its row (calls come in
    // increasing `at`).
    inline void ahead_of(const std::uint8_t* const* rows, std::int64_t at) {
        if (next_tile_) {
            const std::int64_t target = next_tile_lines_due(R, row_bytes_, at);
            const std::uint8_t* next = rows[0] + R * row_bytes_;
            for (; lines_asked_ < target; ++lines_asked_) {
                hwy::Prefetch(next + lines_asked_ * kPrefetchLineBytes);
            }
            return;
        }
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
    bool next_tile_;
    std::int64_t lines_asked_ = 0;  // lines of the next tile prefetched so far
};

}  // namespace brigade::model::cpu
