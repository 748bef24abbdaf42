#pragma once
// The machine's memory read bandwidth as the decode kernels could reach it: the bound every
// "ratio" of engine_bench and kernels_bench is taken against.

#include <cstddef>

#include "model/cpu/thread_pool.hpp"

namespace brigade::bench {

// Every thread of `pool` sums its slice of a `bytes` buffer (first touched by the thread that
// reads it, so the timed passes hold only the reads); best GB/s of `reps` passes, which take in
// turn four ways of reading a slice: one stream or four side by side (as a decode kernel reads a
// tile's rows), each with and without prefetching 2 KiB ahead as the decode kernels do, so a
// kernel cannot beat the bound just by reading the way it does. The buffer must exceed the
// last-level cache (1 GiB in both benches). `reps` should be a multiple of 4.
double measure_read_bandwidth_gbs(model::cpu::ThreadPool& pool, std::size_t bytes, int reps);

}  // namespace brigade::bench
