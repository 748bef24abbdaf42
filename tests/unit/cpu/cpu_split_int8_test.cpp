// Split-int8 activations (matmul_split_int8.cpp): the digits each activation is split into,
// read back through the layout the file documents, and the kernels on zero, extreme and
// non-finite groups. Their products against the reference on every format are in
// cpu_matmul_test.cpp (DecodeKernelsSplitInt8AllFormatsAndThreadCounts). These tests need
// AVX-512 VNNI and skip, saying so, without it.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/kernels.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

bool kernel_runs_here() {
    return split_int8_kernel_supports(
        test::make_quant_weight(4, 64, DType::kBF16, 1, 64, 1, 0).view);
}
#define SKIP_WITHOUT_VNNI()  \
    if (!kernel_runs_here()) \
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI: the split-int8 kernels do not run here"

// Digit k of element e of token t, read by the documented layout: chunks of 512 / bits
// elements, 4 digits a chunk; 4-bit chunks hold a digit's 64 even elements, then its 64 odd ones.
int digit(const std::vector<std::int8_t>& digits, const WeightMatrix& w, std::int64_t t,
          std::int64_t e, int k) {
    const std::int64_t elems = 512 / w.bits;
    const std::int64_t chunk = e / elems, in_chunk = e % elems;
    std::int64_t at = t * split_int8_token_bytes(w) + chunk * 4 * elems + k * elems;
    at += w.bits == 4 ? (in_chunk % 2) * 64 + in_chunk / 2 : in_chunk;
    return digits[static_cast<std::size_t>(at)];
}

struct Split {
    std::vector<std::int8_t> digits;
    std::vector<float> unit, sum;
};

// Splits all groups of x[n, w.cols], in two calls (the second half of the groups first) when
// `halves`, as the backend's threads may.
Split split_all(const WeightMatrix& w, const std::vector<float>& x, std::int64_t n, bool halves) {
    const std::int64_t groups = n * (w.cols / w.group_size);
    Split s;
    s.digits.assign(static_cast<std::size_t>(n * split_int8_token_bytes(w)), 99);
    s.unit.assign(static_cast<std::size_t>(groups), NAN);
    s.sum.assign(static_cast<std::size_t>(groups), NAN);
    if (halves) {
        split_activations_int8(w, x.data(), groups / 2, groups, s.digits.data(), s.unit.data(),
                               s.sum.data());
        split_activations_int8(w, x.data(), 0, groups / 2, s.digits.data(), s.unit.data(),
                               s.sum.data());
    } else {
        split_activations_int8(w, x.data(), 0, groups, s.digits.data(), s.unit.data(),
                               s.sum.data());
    }
    return s;
}

TEST(SplitInt8, DigitsReconstructEveryActivationWithinHalfTheLastDigit) {
    SKIP_WITHOUT_VNNI();
    for (int bits : {4, 8}) {
        for (int group : {32, 64, 128}) {
            for (std::int64_t cols : {96, 160, 352, 384, 640}) {
                if (cols % group != 0) continue;
                const auto w = test::make_quant_weight(bits, group, DType::kBF16, 1, cols, 3, 0);
                const std::int64_t n = 3;
                // Magnitudes from 1e-3 to 1e3 by group, and token 1's first group all zero.
                auto x = test::random_floats(static_cast<std::size_t>(n * cols), cols + bits);
                for (std::int64_t i = 0; i < n * cols; ++i) {
                    x[i] *= std::pow(10.0f, static_cast<float>((i / group) % 7) - 3.0f);
                }
                for (std::int64_t c = 0; c < group; ++c) x[cols + c] = 0.0f;
                const std::string what = "q" + std::to_string(bits) + " g" + std::to_string(group) +
                                         " cols=" + std::to_string(cols);
                const Split s = split_all(w.view, x, n, /*halves=*/false);
                const Split h = split_all(w.view, x, n, /*halves=*/true);
                ASSERT_EQ(s.digits, h.digits) << what;
                int failures = 0;
                const std::int64_t n_groups = cols / group;
                for (std::int64_t t = 0; t < n && failures < 5; ++t) {
                    for (std::int64_t g = 0; g < n_groups; ++g) {
                        const std::size_t gi = static_cast<std::size_t>(t * n_groups + g);
                        double max_abs = 0.0, sum = 0.0;
                        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
                            max_abs = std::max(max_abs, std::abs(double{x[t * cols + c]}));
                            sum += x[t * cols + c];
                        }
                        // Positions of the digits below d0 (kernels.hpp) and the value of d0.
                        const int p[4] = {0, bits == 4 ? 6 : 7, bits == 4 ? 12 : 14,
                                          bits == 4 ? 17 : 21};
                        const double step = max_abs / 127.0;
                        EXPECT_NEAR(s.unit[gi], std::ldexp(step, bits == 4 ? -17 : -7),
                                    1e-6 * s.unit[gi])
                            << what;
                        const double d0_value = std::ldexp(s.unit[gi], bits == 4 ? 17 : 7);
                        const int limit[4] = {127, 1 << (p[1] - 1), 1 << (p[2] - p[1] - 1),
                                              1 << (p[3] - p[2] - 1)};
                        EXPECT_NEAR(s.sum[gi], sum, 1e-5 * max_abs * group) << what;
                        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
                            int d[4];
                            for (int k = 0; k < 4; ++k) d[k] = digit(s.digits, w.view, t, c, k);
                            double back = 0.0;
                            bool in_range = true;
                            for (int k = 0; k < 4; ++k) {
                                back += d0_value * std::ldexp(d[k], -p[k]);
                                in_range &= std::abs(d[k]) <= limit[k];
                            }
                            const double err = std::abs(back - x[t * cols + c]);
                            // Half the last digit, plus the f32 rounding of the first
                            // remainder (2^-24 of half a step: under 1/8 of that).
                            const double bound = std::ldexp(d0_value, -p[3] - 1) * 1.2;
                            if (!in_range || !(err <= bound)) {
                                ++failures;
                                ADD_FAILURE()
                                    << what << " t=" << t << " c=" << c << " x=" << x[t * cols + c]
                                    << " digits " << d[0] << " " << d[1] << " " << d[2] << " "
                                    << d[3] << " err=" << err << " unit=" << s.unit[gi];
                            }
                        }
                    }
                }
                // The padding of a partial last chunk is zero (it meets zero codes).
                const std::int64_t elems = 512 / bits;
                if (cols % elems != 0) {
                    for (std::int64_t t = 0; t < n; ++t) {
                        for (std::int64_t e = cols; e < (cols / elems + 1) * elems; ++e) {
                            for (int k = 0; k < 4; ++k) {
                                ASSERT_EQ(digit(s.digits, w.view, t, e, k), 0)
                                    << what << " e=" << e;
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST(SplitInt8, ZeroGroupsGiveZeroAndAHugeLaneLeavesTheRestNegligible) {
    SKIP_WITHOUT_VNNI();
    auto ref = make_backend(BackendKind::kReference).value();
    CpuTuning tuning;
    tuning.int16_activations = false;
    CpuBackend cpu(BackendOptions{2}, tuning);
    for (int bits : {4, 8}) {
        auto w = test::make_quant_weight(bits, 64, DType::kBF16, 11, 256, 6, 1);
        std::vector<float> x(2 * 256, 0.0f);  // token 0: all zero
        for (int c = 0; c < 256; ++c) x[256 + c] = c % 64 == 9 ? -1e30f : 1e-30f;
        std::vector<float> y(2 * 11), expect(y.size());
        cpu.matmul(w.view, x.data(), 2, y.data());
        ref->matmul(w.view, x.data(), 2, expect.data());
        for (int r = 0; r < 11; ++r) {
            EXPECT_EQ(y[r], 0.0f) << "bits=" << bits << " r=" << r;
            EXPECT_NE(expect[11 + r], 0.0f);
            EXPECT_NEAR(y[11 + r], expect[11 + r], 1e-5 * std::abs(expect[11 + r]))
                << "bits=" << bits << " r=" << r;
        }
    }
}

TEST(SplitInt8, ANanActivationMakesTheOutputsNan) {
    SKIP_WITHOUT_VNNI();
    CpuTuning tuning;
    tuning.int16_activations = false;
    CpuBackend cpu(BackendOptions{1}, tuning);
    auto w = test::make_quant_weight(4, 64, DType::kBF16, 5, 128, 2, 0);
    auto x = test::random_floats(128, 4);
    x[70] = NAN;
    std::vector<float> y(5);
    cpu.matmul(w.view, x.data(), 1, y.data());
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << v;
}

}  // namespace
}  // namespace brigade::model::cpu
