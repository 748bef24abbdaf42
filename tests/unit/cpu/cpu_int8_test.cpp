// The int8-activation decode path (model/cpu/matmul_int8*.cpp): every instruction-set variant
// this machine runs, on odd shapes, 4 and 8 bits, groups of 32/64/128, F32/F16/BF16 scales,
// n = 1..4, with and without bias, through the kernel entry points and through CpuBackend.
//
// Two references:
// - An emulation written here, in double and in plain element order (no kernel layout): x is
//   rounded per group exactly as the kernels round it (step = max|x_g| / 127 in f32,
//   xq = |x * (127 / max)| + 0.5 truncated, clamped, signed), and
//       y_int8 = Σ_c w_c x_c - Σ_g scale_g Σ_{c∈g} q_c (x_c - step_g xq_c).
//   Kernels must match it to f32 summation order: 1e-5 * Σ|x w| + 1e-6 (as the f32 kernels).
// - The scalar reference backend (exact f32 x): the difference may add the rounding bound
//       B = Σ_g scale_g · step_g / 2 · Σ_{c∈g} q_c      (|x - step·xq| <= step / 2).
// B is not trivially loose: `BoundCatchesWrongNibbleOrderAndWrongScale` shows that pairing
// nibbles with the wrong activations, or scaling a group with its neighbour's step, exceeds it.
//
// x has a different magnitude per group (2^-4 .. 2^4), as real activations have outliers, so
// a step taken from the wrong group is a large error.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

// x [n, cols]: uniform in [-1, 1) times 2^k per group, k in [-4, 4].
std::vector<float> activations(std::int64_t n, std::int64_t cols, std::int64_t group,
                               std::uint32_t seed) {
    auto x = test::random_floats(static_cast<std::size_t>(n * cols), seed);
    std::mt19937 rng(seed ^ 0x9E3779B9u);
    std::uniform_int_distribution<int> exp_dist(-4, 4);
    for (std::int64_t i = 0; i < n * cols; i += group) {
        const float m = std::ldexp(1.0f, exp_dist(rng));
        for (std::int64_t e = i; e < i + group; ++e) x[static_cast<std::size_t>(e)] *= m;
    }
    return x;
}

// The kernels' rounding, in element order.
struct Rounded {
    std::vector<int> xq;       // [n, cols]
    std::vector<double> step;  // [n, n_groups]
};

Rounded round_like_kernels(const std::vector<float>& x, std::int64_t n, std::int64_t cols,
                           std::int64_t group) {
    Rounded out;
    out.xq.resize(static_cast<std::size_t>(n * cols));
    for (std::int64_t i = 0; i < n * cols; i += group) {
        float max_abs = 0.0f;
        for (std::int64_t e = i; e < i + group; ++e) {
            max_abs = std::max(max_abs, std::fabs(x[static_cast<std::size_t>(e)]));
        }
        const float inv = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
        out.step.push_back(max_abs / 127.0f);
        for (std::int64_t e = i; e < i + group; ++e) {
            const float v = x[static_cast<std::size_t>(e)] * inv;
            const int q = std::min(static_cast<int>(std::fabs(v) + 0.5f), 127);
            out.xq[static_cast<std::size_t>(e)] = v < 0.0f ? -q : q;
        }
    }
    return out;
}

// How the emulation pairs codes with activations and steps; the wrong ones are for the
// tightness test.
enum class Pairing { kRight, kSwappedNibbles, kNeighbourStep };

double emulated(const test::OwnedWeight& w, const std::vector<float>& x, const Rounded& xr,
                std::int64_t t, std::int64_t r, Pairing pairing = Pairing::kRight) {
    const std::int64_t cols = w.view.cols, group = w.view.group_size;
    const std::int64_t n_groups = cols / group;
    double y = 0.0;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        const double scale = w.group_scale[static_cast<std::size_t>(r * n_groups + g)];
        std::int64_t sg = t * n_groups + g;
        if (pairing == Pairing::kNeighbourStep) sg = t * n_groups + (g + 1) % n_groups;
        const double step = xr.step[static_cast<std::size_t>(sg)];
        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
            const auto i = static_cast<std::size_t>(t * cols + c);
            const double q = w.codes[static_cast<std::size_t>(r * cols + c)];
            const auto ci = pairing == Pairing::kSwappedNibbles ? (i ^ 1u) : i;
            y += static_cast<double>(w.dense[static_cast<std::size_t>(r * cols + c)]) * x[i];
            y -= scale * q * (x[i] - step * xr.xq[ci]);
        }
    }
    return y;
}

double rounding_bound(const test::OwnedWeight& w, const Rounded& xr, std::int64_t t,
                      std::int64_t r) {
    const std::int64_t cols = w.view.cols, group = w.view.group_size;
    const std::int64_t n_groups = cols / group;
    double bound = 0.0;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        double code_sum = 0.0;
        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
            code_sum += w.codes[static_cast<std::size_t>(r * cols + c)];
        }
        bound += w.group_scale[static_cast<std::size_t>(r * n_groups + g)] *
                 xr.step[static_cast<std::size_t>(t * n_groups + g)] / 2.0 * code_sum;
    }
    return bound;
}

double magnitude(const test::OwnedWeight& w, const std::vector<float>& x, std::int64_t t,
                 std::int64_t r) {
    const std::int64_t cols = w.view.cols;
    double m = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) {
        m += std::abs(static_cast<double>(x[static_cast<std::size_t>(t * cols + c)]) *
                      w.dense[static_cast<std::size_t>(r * cols + c)]);
    }
    return m;
}

struct Shape {
    int bits;
    int group;
    std::int64_t cols;
    DType scale_dtype;
    std::string name() const {
        // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "q" + to_string(...).
        std::string s = "q";
        s += std::to_string(bits);
        s += " g" + std::to_string(group) + " cols=" + std::to_string(cols);
        s += " scales=";
        s += dtype_name(scale_dtype);
        return s;
    }
};

// Odd group counts (96 = 3 x 32, 352 = 11 x 32, 320 = 5 x 64) exercise the 16-byte tail
// chunk of 4-bit rows; 2560 x g32 spans more than one widened block of 64 groups.
std::vector<Shape> shapes() {
    std::vector<Shape> out;
    for (int bits : {4, 8}) {
        out.push_back({bits, 32, 96, DType::kBF16});
        out.push_back({bits, 32, 352, DType::kF16});
        out.push_back({bits, 32, 2592, DType::kBF16});
        out.push_back({bits, 64, 320, DType::kF32});
        out.push_back({bits, 64, 128, DType::kBF16});
        out.push_back({bits, 128, 384, DType::kBF16});
        out.push_back({bits, 128, 1152, DType::kF16});
    }
    return out;
}

std::string variants_line() {
    std::string s;
    for (Int8Variant v : int8_variants_available()) s += std::string(" ") + int8_variant_name(v);
    return s;
}

TEST(CpuInt8, ListsVariantsScalarFirstBestLast) {
    const auto variants = int8_variants_available();
    ASSERT_FALSE(variants.empty());
    EXPECT_EQ(variants.front(), Int8Variant::kScalar);
    EXPECT_EQ(int8_resolve_variant(Int8Variant::kAuto), variants.back());
    // A variant this machine cannot run resolves to the best one instead of crashing.
    for (Int8Variant v : {Int8Variant::kAvx2, Int8Variant::kAvxVnni, Int8Variant::kAvx512Vnni,
                          Int8Variant::kNeonDot}) {
        const Int8Variant got = int8_resolve_variant(v);
        EXPECT_TRUE(got == v || got == variants.back());
    }
    std::cout << "[ int8     ] variants run on this machine:" << variants_line() << "\n";
    RecordProperty("int8_variants", variants_line());
}

TEST(CpuInt8, QuantizerGivesTheEmulatedRoundingInTheKernelLayout) {
    for (const Shape& s : shapes()) {
        const auto w = test::make_quant_weight(s.bits, s.group, s.scale_dtype, 1, s.cols, 3);
        const std::int64_t n = 3, n_groups = n * s.cols / s.group;
        const auto x = activations(n, s.cols, s.group, 11);
        const Rounded xr = round_like_kernels(x, n, s.cols, s.group);
        std::vector<std::int8_t> xq(static_cast<std::size_t>(n * s.cols), 0), xs(xq.size(), 0);
        std::vector<float> step(static_cast<std::size_t>(n_groups)), sum(step.size());
        std::vector<float> step_s(step.size()), sum_s(step.size());
        std::vector<std::int32_t> qsum(step.size()), qsum_s(step.size());
        // Two calls over a split range, as the backend's threads do.
        quantize_activations_int8(w.view, x.data(), 0, n_groups / 2, xq.data(), step.data(),
                                  sum.data(), qsum.data());
        quantize_activations_int8(w.view, x.data(), n_groups / 2, n_groups, xq.data(), step.data(),
                                  sum.data(), qsum.data());
        int8_detail::quantize_scalar(w.view, x.data(), 0, n_groups, xs.data(), step_s.data(),
                                     sum_s.data(), qsum_s.data());
        EXPECT_EQ(xq, xs) << s.name();
        EXPECT_EQ(step, step_s) << s.name();
        EXPECT_EQ(qsum, qsum_s) << s.name();
        const std::int64_t row_bytes = s.cols * s.bits / 8;
        for (std::int64_t t = 0; t < n; ++t) {
            for (std::int64_t c = 0; c < s.cols; ++c) {
                std::int64_t slot = c;
                if (s.bits == 4) {
                    const std::int64_t j = c / 2, start = j - j % 32;
                    const std::int64_t k = std::min<std::int64_t>(32, row_bytes - start);
                    slot = 2 * start + (c % 2) * k + (j - start);
                }
                ASSERT_EQ(xq[static_cast<std::size_t>(t * s.cols + slot)],
                          xr.xq[static_cast<std::size_t>(t * s.cols + c)])
                    << s.name() << " t=" << t << " c=" << c;
            }
        }
        for (std::int64_t i = 0; i < n_groups; ++i) {
            double exact = 0.0, abs_sum = 0.0;
            int qs = 0;
            for (std::int64_t e = i * s.group; e < (i + 1) * s.group; ++e) {
                exact += x[static_cast<std::size_t>(e)];
                abs_sum += std::abs(x[static_cast<std::size_t>(e)]);
                qs += xr.xq[static_cast<std::size_t>(e)];
            }
            EXPECT_NEAR(sum[static_cast<std::size_t>(i)], exact, 1e-6 * abs_sum) << s.name();
            EXPECT_EQ(qsum[static_cast<std::size_t>(i)], qs) << s.name();
            EXPECT_EQ(step[static_cast<std::size_t>(i)],
                      static_cast<float>(xr.step[static_cast<std::size_t>(i)]));
        }
    }
}

// One way to run rows [row_begin, row_end): a variant, or the VNNI kernel with emulated
// vpdpbusd (x86 with AVX2 only).
struct Runner {
    std::string name;
    std::function<void(const WeightMatrix&, const Int8Activations&, std::int64_t, std::int64_t,
                       std::int64_t, float*, std::int64_t)>
        run;
};

std::vector<Runner> runners() {
    std::vector<Runner> out;
    for (Int8Variant v : int8_variants_available()) {
        out.push_back({int8_variant_name(v),
                       [v](const WeightMatrix& w, const Int8Activations& xa, std::int64_t n,
                           std::int64_t b, std::int64_t e, float* y, std::int64_t ldy) {
                           gemv_rows_int8(v, w, xa, n, b, e, nullptr, y, ldy);
                       }});
    }
#if BRIGADE_INT8_X86
    if (int8_detail::cpu_has_avx2()) {
        out.push_back({"vnni-kernel-with-emulated-vpdpbusd",
                       [](const WeightMatrix& w, const Int8Activations& xa, std::int64_t n,
                          std::int64_t b, std::int64_t e, float* y, std::int64_t ldy) {
                           int8_detail::gemv_rows_vnni_emulated({w, xa}, n, b, e, nullptr, y, ldy);
                       }});
    }
#endif
    return out;
}

// Every variant through gemv_rows_int8, against the emulation (f32-order tolerance) and the
// exact reference (plus the rounding bound).
TEST(CpuInt8, EveryVariantMatchesTheEmulationOnOddShapes) {
    const auto all = runners();
    std::cout << "[ int8     ] kernels tested:";
    for (const auto& r : all) std::cout << " " << r.name;
    std::cout << "\n";
    for (const Runner& runner : all) {
        for (const Shape& s : shapes()) {
            for (std::int64_t rows : {5, 37}) {
                const int misalign = static_cast<int>(rows % 4);
                const auto w = test::make_quant_weight(s.bits, s.group, s.scale_dtype, rows, s.cols,
                                                       7 + s.cols, misalign);
                for (std::int64_t n = 1; n <= 4; ++n) {
                    const std::int64_t n_groups = n * s.cols / s.group;
                    const auto x = activations(n, s.cols, s.group, 100 + n);
                    const Rounded xr = round_like_kernels(x, n, s.cols, s.group);
                    std::vector<std::int8_t> xq(
                        static_cast<std::size_t>(n * s.cols + kInt8ActivationPadding), 0);
                    std::vector<float> step(static_cast<std::size_t>(n_groups)), sum(step.size());
                    std::vector<std::int32_t> qsum(step.size());
                    quantize_activations_int8(w.view, x.data(), 0, n_groups, xq.data(), step.data(),
                                              sum.data(), qsum.data());
                    const Int8Activations xa{xq.data(), step.data(), sum.data(), qsum.data(),
                                             n % 2 == 0 ? 256 : 0};
                    std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                    // Two row ranges, as the backend's threads take them.
                    runner.run(w.view, xa, n, 0, rows / 3, y.data(), rows);
                    runner.run(w.view, xa, n, rows / 3, rows, y.data(), rows);
                    int failures = 0;
                    for (std::int64_t t = 0; t < n && failures < 3; ++t) {
                        for (std::int64_t r = 0; r < rows && failures < 3; ++r) {
                            const double got = y[static_cast<std::size_t>(t * rows + r)];
                            const double mag = magnitude(w, x, t, r);
                            const double want = emulated(w, x, xr, t, r);
                            if (std::abs(got - want) > 1e-5 * mag + 1e-6) {
                                ++failures;
                                ADD_FAILURE() << runner.name << " " << s.name() << " rows=" << rows
                                              << " n=" << n << " t=" << t << " r=" << r
                                              << " got=" << got << " emulated=" << want;
                            }
                        }
                    }
                }
            }
        }
    }
}

// Through CpuBackend::matmul with the tuning hook forcing each variant: 1-3 threads, n = 1..4
// on the int8 path (bias or not), n = 5 and 9 and the formats the int8 kernels do not take on
// the existing f32 paths (f32 tolerance: they must not be rounded).
TEST(CpuInt8, BackendRoutesDecodeThroughEachVariantAndFallsBackElsewhere) {
    auto ref = make_backend(BackendKind::kReference).value();
    const auto bias_values = test::random_floats(64, 5);
    for (Int8Variant variant : int8_variants_available()) {
        CpuTuning tuning;
        tuning.int16_activations = false;
        tuning.int8_activations = true;
        tuning.int8_variant = variant;
        for (int threads : {1, 3}) {
            CpuBackend cpu(BackendOptions{threads}, tuning);
            std::vector<std::pair<Shape, bool>> cases;  // (shape, int8 path expected)
            for (const Shape& s : shapes()) cases.push_back({s, true});
            for (int bits : {2, 3, 5, 6}) cases.push_back({{bits, 64, 192, DType::kBF16}, false});
            for (const auto& [s, int8_path] : cases) {
                const std::int64_t rows = 19;
                const auto w = test::make_quant_weight(s.bits, s.group, s.scale_dtype, rows, s.cols,
                                                       31 + s.bits, 1);
                for (bool with_bias : {false, true}) {
                    const WeightVector bias{DType::kF32, rows, bias_values.data()};
                    for (std::int64_t n : {1, 2, 3, 4, 5, 9}) {
                        const auto x = activations(n, s.cols, s.group, 7 * n + s.group);
                        const Rounded xr = round_like_kernels(x, n, s.cols, s.group);
                        std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                        std::vector<float> expect(y.size());
                        cpu.matmul(w.view, x.data(), n, y.data(), with_bias ? &bias : nullptr);
                        ref->matmul(w.view, x.data(), n, expect.data(),
                                    with_bias ? &bias : nullptr);
                        const bool rounded = int8_path && n <= 4;
                        int failures = 0;
                        for (std::int64_t t = 0; t < n && failures < 3; ++t) {
                            for (std::int64_t r = 0; r < rows && failures < 3; ++r) {
                                const auto i = static_cast<std::size_t>(t * rows + r);
                                double tol = 1e-5 * magnitude(w, x, t, r) + 1e-6;
                                if (rounded) tol += rounding_bound(w, xr, t, r);
                                const double diff = std::abs(static_cast<double>(y[i]) - expect[i]);
                                if (!(diff <= tol)) {  // NaN (an output never written) fails too
                                    ++failures;
                                    ADD_FAILURE()
                                        << int8_variant_name(variant) << " threads=" << threads
                                        << " " << s.name() << " bias=" << with_bias << " n=" << n
                                        << " t=" << t << " r=" << r << " cpu=" << y[i]
                                        << " ref=" << expect[i] << " tol=" << tol;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// The rounding bound is what the path is held to, so it must be tight enough to catch the
// likely bugs: the right emulation stays inside it, a swapped nibble order or a step taken from
// the neighbouring group leaves it for most outputs.
TEST(CpuInt8, BoundCatchesWrongNibbleOrderAndWrongScale) {
    for (int group : {32, 64, 128}) {
        const std::int64_t rows = 64, cols = 512, n = 2;
        const auto w = test::make_quant_weight(4, group, DType::kBF16, rows, cols, 77);
        const auto x = activations(n, cols, group, 78);
        const Rounded xr = round_like_kernels(x, n, cols, group);
        auto ref = make_backend(BackendKind::kReference).value();
        std::vector<float> expect(static_cast<std::size_t>(n * rows));
        ref->matmul(w.view, x.data(), n, expect.data());
        int swapped_out = 0, neighbour_out = 0;
        double worst_ratio = 0.0;
        for (std::int64_t t = 0; t < n; ++t) {
            for (std::int64_t r = 0; r < rows; ++r) {
                const double e = expect[static_cast<std::size_t>(t * rows + r)];
                const double tol = 1e-5 * magnitude(w, x, t, r) + 1e-6;
                const double bound = rounding_bound(w, xr, t, r);
                const double right = std::abs(emulated(w, x, xr, t, r) - e);
                EXPECT_LE(right, bound + tol);
                worst_ratio = std::max(worst_ratio, right / bound);
                if (std::abs(emulated(w, x, xr, t, r, Pairing::kSwappedNibbles) - e) > bound + tol)
                    ++swapped_out;
                if (std::abs(emulated(w, x, xr, t, r, Pairing::kNeighbourStep) - e) > bound + tol)
                    ++neighbour_out;
            }
        }
        const int total = static_cast<int>(n * rows);
        EXPECT_GE(swapped_out, total * 9 / 10) << "group " << group;
        // Neighbouring groups share their magnitude 1 time in 9 (activations()), and then a
        // swapped step is a small error; otherwise it is several bounds.
        EXPECT_GE(neighbour_out, total * 3 / 4) << "group " << group;
        // The actual rounding error reaches a visible fraction of the bound (random rounding
        // errors partly cancel, so about 1/sqrt(terms) of it).
        EXPECT_GT(worst_ratio, 0.02) << "group " << group;
        std::cout << "[ int8     ] g" << group << ": worst |int8 - exact| / bound = " << worst_ratio
                  << ", outside the bound: swapped nibbles " << swapped_out << "/" << total
                  << ", neighbour step " << neighbour_out << "/" << total << "\n";
    }
}

// BackendOptions::cpu_int8_activations reaches the CPU backend: on, outputs carry the int8
// rounding (some leave the f32 tolerance); off (the default), none does.
TEST(CpuInt8, BackendOptionTurnsThePathOn) {
    const auto w = test::make_quant_weight(4, 64, DType::kBF16, 33, 256, 9);
    const auto x = activations(1, 256, 64, 10);
    const Rounded xr = round_like_kernels(x, 1, 256, 64);
    auto ref = make_backend(BackendKind::kReference).value();
    std::vector<float> expect(33);
    ref->matmul(w.view, x.data(), 1, expect.data());
    for (bool on : {false, true}) {
        BackendOptions options;
        options.n_threads = 2;
        options.cpu_int8_activations = on;
        auto cpu = make_backend(BackendKind::kCpu, options).value();
        std::vector<float> y(33);
        cpu->matmul(w.view, x.data(), 1, y.data());
        int outside_f32 = 0;
        for (std::int64_t r = 0; r < 33; ++r) {
            const double diff = std::abs(static_cast<double>(y[static_cast<std::size_t>(r)]) -
                                         expect[static_cast<std::size_t>(r)]);
            const double tol = 1e-5 * magnitude(w, x, 0, r) + 1e-6;
            if (diff > tol) ++outside_f32;
            EXPECT_LE(diff, tol + (on ? rounding_bound(w, xr, 0, r) : 0.0)) << "r=" << r;
        }
        if (on) {
            EXPECT_GT(outside_f32, 0);
        } else {
            EXPECT_EQ(outside_f32, 0);
        }
    }
}

// A NaN or infinity in x is not rounded away: the outputs it feeds are NaN, as in f32.
TEST(CpuInt8, NonFiniteActivationsPropagate) {
    for (int bits : {4, 8}) {
        const auto w = test::make_quant_weight(bits, 32, DType::kBF16, 17, 96, 12);
        for (float bad : {NAN, INFINITY}) {
            auto x = activations(1, 96, 32, 13);
            x[40] = bad;
            for (Int8Variant variant : int8_variants_available()) {
                CpuTuning tuning;
                tuning.int8_activations = true;
                tuning.int8_variant = variant;
                CpuBackend cpu(BackendOptions{2}, tuning);
                std::vector<float> y(17, 0.0f);
                cpu.matmul(w.view, x.data(), 1, y.data());
                for (float v : y) EXPECT_FALSE(std::isfinite(v)) << int8_variant_name(variant);
            }
        }
    }
}

}  // namespace
}  // namespace brigade::model::cpu
