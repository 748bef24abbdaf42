// The next-tile prefetch of the decode kernels' row tiles (model/cpu/tile_prefetch.hpp): the
// lines it asks for, call by call, as the kernels call it.
#include "model/cpu/tile_prefetch.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "model/cpu/cpu_backend.hpp"

namespace brigade::model::cpu {
namespace {

// Every line of the next tile is asked for by the tile's last call, in order and never twice
// (the due count only grows), for every step between calls that the kernels use, 16 bytes
// (4-bit groups of 32) to 128 (8-bit groups of 128), and rows from a part of a line to several
// lines, with or without a short last step.
TEST(TilePrefetch, NextTileLinesAreAllDueByTheTilesLastCall) {
    for (int rows : {2, 4}) {
        for (std::int64_t step : {16, 32, 64, 128}) {
            for (std::int64_t row_bytes : {16, 48, 80, 128, 448, 896, 1000, 1024, 2048}) {
                const std::int64_t lines =
                    (rows * row_bytes + kPrefetchLineBytes - 1) / kPrefetchLineBytes;
                std::int64_t due = 0;
                for (std::int64_t at = 0; at < row_bytes; at += step) {
                    const std::int64_t now = next_tile_lines_due(rows, row_bytes, at);
                    EXPECT_GE(now, due) << rows << " rows of " << row_bytes << ", at " << at;
                    EXPECT_LE(now, lines) << rows << " rows of " << row_bytes << ", at " << at;
                    due = now;
                }
                EXPECT_EQ(due, lines) << rows << " rows of " << row_bytes << ", step " << step;
            }
        }
    }
}

// The stream runs ahead of the tile by about one step, not the whole next tile at once: at the
// first call only the first step's share is due.
TEST(TilePrefetch, NextTileLinesKeepPaceWithTheTile) {
    EXPECT_EQ(next_tile_lines_due(4, 896, 0), 4 * kMaxPrefetchStepBytes / kPrefetchLineBytes);
    EXPECT_EQ(next_tile_lines_due(4, 896, 448), 4 * (448 + kMaxPrefetchStepBytes) / 64);
    EXPECT_EQ(next_tile_lines_due(4, 896, 832), 56);
}

// The default is on exactly on AMD x86 CPUs: the vendor that CPUID gives matches the kernel's
// /proc/cpuinfo (a wrong register order in the vendor string reads as "not AMD").
TEST(TilePrefetch, NextTileDefaultFollowsTheCpuVendor) {
#if defined(__linux__) && (defined(__x86_64__) || defined(_M_X64))
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, vendor;
    while (vendor.empty() && std::getline(cpuinfo, line)) {
        if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
    }
    if (vendor.empty()) GTEST_SKIP() << "/proc/cpuinfo names no vendor";
    EXPECT_EQ(default_next_tile_prefetch_row_bytes(), vendor == "AuthenticAMD" ? 2048 : 0)
        << vendor;
    EXPECT_EQ(cpu_vendor_is_amd(), vendor == "AuthenticAMD") << vendor;
#else
    EXPECT_EQ(default_next_tile_prefetch_row_bytes(), 0);
    EXPECT_FALSE(cpu_vendor_is_amd());
#endif
}

}  // namespace
}  // namespace brigade::model::cpu
