#pragma once
// Prompt-processing GEMM on f32 panels of weight rows: OpenBLAS / Accelerate when the build
// has BLAS (BRIGADE_HAVE_BLAS), the Highway kernels otherwise.

#include <cstdint>

namespace brigade::model::cpu {

// True when a BLAS sgemm is linked in.
bool have_blas();

// Keeps the BLAS library from starting threads of its own: the CPU backend calls `gemm_panel`
// from each of its pool threads on disjoint panels.
void blas_single_threaded();
// Lets the BLAS library use `n_threads` threads (benchmarks measure plain sgemm this way).
void blas_set_threads(int n_threads);

// y[t * ldy + i] = dot(x[t, :], panel[i, :]) for t < n, i < n_rows; x is [n, cols] and
// panel is [n_rows, cols], both row-major f32.
void gemm_panel(const float* x, std::int64_t n, std::int64_t cols, const float* panel,
                std::int64_t n_rows, float* y, std::int64_t ldy);

}  // namespace brigade::model::cpu
