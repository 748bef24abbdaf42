#include "model/cpu/blas_gemm.hpp"

#include "model/cpu/kernels.hpp"

#if defined(BRIGADE_HAVE_BLAS)
#if defined(BRIGADE_ACCELERATE)
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif
#endif

namespace brigade::model::cpu {

bool have_blas() {
#if defined(BRIGADE_HAVE_BLAS)
    return true;
#else
    return false;
#endif
}

void blas_single_threaded() { blas_set_threads(1); }

void blas_set_threads(int n_threads) {
#if defined(BRIGADE_HAVE_BLAS) && !defined(BRIGADE_ACCELERATE)
    openblas_set_num_threads(n_threads);
#else
    (void)n_threads;
#endif
}

void gemm_panel(const float* x, std::int64_t n, std::int64_t cols, const float* panel,
                std::int64_t n_rows, float* y, std::int64_t ldy) {
#if defined(BRIGADE_HAVE_BLAS)
    // C[n, n_rows] = A[n, cols] · B[n_rows, cols]ᵀ, C with leading dimension ldy.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                static_cast<int>(n_rows), static_cast<int>(cols), 1.0f, x, static_cast<int>(cols),
                panel, static_cast<int>(cols), 0.0f, y, static_cast<int>(ldy));
#else
    const WeightMatrix view{DType::kF32, n_rows, cols, panel};
    gemv_rows(view, x, n, 0, n_rows, nullptr, y, ldy, nullptr);
#endif
}

}  // namespace brigade::model::cpu
