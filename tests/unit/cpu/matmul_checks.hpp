#pragma once
// How the CPU matmul tests (cpu_matmul_test.cpp, cpu_matmul_amx_test.cpp) hold CpuBackend::matmul
// to the reference backend's product, on every weight format and odd shapes.
//
// Tolerance: |cpu - ref| <= 1e-5 * sum_c |x_c * w_rc| + 1e-6 per output. Both sides sum in
// f32 in different orders; the bound on that difference is about cols * 2^-24 * sum|terms|
// (3e-5 relative for 384 columns at worst, typically 100x less), so 1e-5 catches any wrong
// element or dropped block while allowing reordering.
//
// The int16-activation decode path (matmul_int16.cpp) additionally rounds each x to a step of
// max|x_g|/32767 per weight group g; its tolerance adds the exact worst case of that rounding,
// sum_g scale_g * step_g / 2 * sum_{c in g} q_c, computed here from the codes. The split-int8
// GEMV (matmul_split_int8*.cpp: AVX-512 VNNI, AVX-VNNI or Arm sdot; one and two tokens) and the
// AMX tiles for a batch of decode steps round to max|x_g|/(127 * 2^7) (two digits), the AMX
// tiles for prompt rows to max|x_g|/(127 * 2^17) (four); each adds the same term for its step.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/matmul_split_int8.hpp"  // the digit plans
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu::matmul_checks {

inline std::unique_ptr<Backend> reference() {
    return make_backend(BackendKind::kReference).value();
}

struct Case {
    std::string what;
    test::OwnedWeight w;
};

inline std::vector<Case> all_formats(std::int64_t rows, int misalign) {
    std::vector<Case> cases;
    const std::uint32_t seed = static_cast<std::uint32_t>(rows * 7 + misalign);
    for (std::int64_t cols : {37, 96, 160, 352}) {
        for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
            cases.push_back({std::string(dtype_name(dt)) + " cols=" + std::to_string(cols),
                             test::make_plain_weight(dt, rows, cols, seed + cols, misalign)});
        }
    }
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        for (int group : {32, 64, 128}) {
            for (std::int64_t cols : {96, 160, 352, 384}) {
                if (cols % group != 0) continue;
                if (group == 32 && cols == 384) continue;  // keep the run short
                const DType sd =
                    bits % 2 == 0 ? DType::kBF16 : (bits == 3 ? DType::kF16 : DType::kF32);
                cases.push_back(
                    {std::string("q").append(std::to_string(bits)) + " g" + std::to_string(group) +
                         " cols=" + std::to_string(cols) + " scales=" + std::string(dtype_name(sd)),
                     test::make_quant_weight(bits, group, sd, rows, cols,
                                             seed + bits * 31 + group + cols, misalign)});
            }
        }
    }
    return cases;
}

// How a decode path rounds the activations: not at all, or to max|x_g| / levels per group g.
// kSplitInt8: the GEMV's two digits (one and two tokens); kAmx: the tiles' four (3 tokens and
// more), and the GEMV's for 1-2 tokens of the same run.
enum class Rounding { kNone, kInt16, kSplitInt8, kAmx };
inline double rounding_levels(Rounding rounding) {
    if (rounding == Rounding::kInt16) return 32767.0;
    const auto& plan =
        rounding == Rounding::kAmx ? split_int8::kAmxDigits : split_int8::kGemvDigits;
    return 127.0 / plan.unit_in_steps();
}

// Worst-case error of rounded activations for output (t, r), see the file comment.
inline double rounding_bound(const test::OwnedWeight& w, const std::vector<float>& x,
                             std::int64_t t, std::int64_t r, Rounding rounding) {
    if (rounding == Rounding::kNone || !w.view.quantized()) return 0.0;
    const std::int64_t cols = w.view.cols, group = w.view.group_size;
    const std::int64_t n_groups = cols / group;
    double bound = 0.0;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        double max_abs = 0.0, code_sum = 0.0;
        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
            max_abs = std::max(max_abs, static_cast<double>(std::abs(x[t * cols + c])));
            code_sum += w.codes[r * cols + c];
        }
        bound += w.group_scale[r * n_groups + g] * (max_abs / rounding_levels(rounding)) / 2.0 *
                 code_sum;
    }
    return bound;
}

// Checks y against the reference product, with the tolerance of the file comment.
inline void expect_close_matmul(const test::OwnedWeight& w, const std::vector<float>& x,
                                std::int64_t n, const std::vector<float>& y,
                                const std::vector<float>& ref, const std::string& what,
                                Rounding rounding = Rounding::kNone) {
    const std::int64_t rows = w.view.rows, cols = w.view.cols;
    int failures = 0;
    for (std::int64_t t = 0; t < n && failures < 5; ++t) {
        for (std::int64_t r = 0; r < rows && failures < 5; ++r) {
            double magnitude = 0.0;
            for (std::int64_t c = 0; c < cols; ++c) {
                magnitude += std::abs(static_cast<double>(x[t * cols + c]) * w.dense[r * cols + c]);
            }
            double tol = 1e-5 * magnitude + 1e-6;
            tol += rounding_bound(w, x, t, r, rounding);
            const double diff = std::abs(static_cast<double>(y[t * rows + r]) - ref[t * rows + r]);
            if (!(diff <= tol)) {  // NaN (an output never written) fails too
                ++failures;
                ADD_FAILURE() << what << " n=" << n << " t=" << t << " r=" << r
                              << " cpu=" << y[t * rows + r] << " ref=" << ref[t * rows + r]
                              << " tol=" << tol;
            }
        }
    }
}

inline void run_matmul_cases(Backend& cpu, const std::string& label,
                             std::initializer_list<std::int64_t> ns,
                             Rounding rounding = Rounding::kNone) {
    auto ref = reference();
    int misalign = 0;
    for (std::int64_t rows : {5, 37}) {
        misalign = (misalign + 1) % 4;
        for (const auto& c : all_formats(rows, misalign)) {
            ASSERT_TRUE(cpu.supports(c.w.view)) << c.what;
            for (std::int64_t n : ns) {
                const auto x = test::random_floats(static_cast<std::size_t>(n * c.w.view.cols),
                                                   static_cast<std::uint32_t>(n + rows));
                std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                std::vector<float> expect(y.size());
                cpu.matmul(c.w.view, x.data(), n, y.data());
                ref->matmul(c.w.view, x.data(), n, expect.data());
                expect_close_matmul(c.w, x, n, y, expect,
                                    label + " " + c.what + " misalign=" + std::to_string(misalign),
                                    rounding);
            }
        }
    }
}

}  // namespace brigade::model::cpu::matmul_checks
