#pragma once
// The machine's f32 multiply-add peak as the decode kernels could reach it: every thread of a
// pool runs independent vector FMAs at the widest f32 vectors the kernels use (Highway's best
// target, at most 16 lanes). "Compute-bound" in the benches means compared with this.

#include "model/cpu/thread_pool.hpp"

namespace brigade::bench {

// Best GFLOP/s (2 per multiply-add) of `reps` timed passes with every thread of `pool`.
double measure_fma_peak_gflops(model::cpu::ThreadPool& pool, int reps);

}  // namespace brigade::bench
