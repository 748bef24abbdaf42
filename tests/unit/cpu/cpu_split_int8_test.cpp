// Split-int8 activations (matmul_split_int8*.cpp, 4-bit weights), each instruction set this CPU
// runs: the digits each activation is split into,
// read back through the layout the file documents, and the kernels on zero, extreme and
// non-finite groups. Their products against the reference on every format are in
// cpu_matmul_test.cpp (DecodeKernelsSplitInt8AllFormatsAndThreadCounts). These tests need
// AVX2 (x86) or the dot-product extension (Arm) and skip, saying so, without either.

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_split_int8.hpp"  // the GEMV's digit plan
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

#define SKIP_WITHOUT_VNNI()                      \
    if (split_int8_variants_available().empty()) \
    GTEST_SKIP() << "this CPU has no split-int8 kernel (AVX2 or Arm dot products)"

constexpr const split_int8::DigitPlan& kPlan = split_int8::kGemvDigits;

// Split-int8 activations on instruction set `variant`, nothing else opted in.
CpuTuning split_tuning(SplitInt8Variant variant) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_variant = variant;
    return tuning;
}

// Digit k of element e of token t, read by the documented layout: chunks of 128 elements, the
// plan's digits in turn in each chunk, each 64 bytes of even elements, then 64 of odd ones.
int digit(const std::vector<std::int8_t>& digits, const WeightMatrix& w, std::int64_t t,
          std::int64_t e, int k) {
    const std::int64_t chunk = e / 128, in_chunk = e % 128;
    const std::int64_t at = t * split_int8_token_bytes(w) + chunk * 128 * kPlan.count + k * 128 +
                            (in_chunk % 2) * 64 + in_chunk / 2;
    return digits[static_cast<std::size_t>(at)];
}

// Every expected output is nonzero (else the case would test nothing) and y is within 1e-5 of
// it, relative.
void expect_relative(const std::vector<float>& y, const std::vector<float>& expect,
                     SplitInt8Variant variant, int group) {
    ASSERT_EQ(y.size(), expect.size());
    for (std::size_t r = 0; r < y.size(); ++r) {
        EXPECT_NE(expect[r], 0.0f);
        EXPECT_NEAR(y[r], expect[r], 1e-5 * std::abs(expect[r]))
            << split_int8_variant_name(variant) << " group=" << group << " r=" << r;
    }
}

// |y_r - reference| allowed for one token on 4-bit w: f32 reordering, 1e-5 of Σ|x·w|, plus the
// digits' worst case, half the last digit's place times Σ scale · q per group.
double gemv_tolerance(const test::OwnedWeight& w, const std::vector<float>& x, std::int64_t r) {
    const std::int64_t cols = w.view.cols, group = w.view.group_size;
    double magnitude = 0.0, digits = 0.0;
    for (std::int64_t g = 0; g < cols / group; ++g) {
        double max_abs = 0.0, code_sum = 0.0;
        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
            max_abs = std::max(max_abs, double{std::abs(x[c])});
            code_sum += w.codes[r * cols + c];
            magnitude += std::abs(double{x[c]} * w.dense[r * cols + c]);
        }
        const double last_place = max_abs / 127.0 * kPlan.unit_in_steps();
        digits += w.group_scale[r * (cols / group) + g] * last_place / 2.0 * code_sum;
    }
    return 1e-5 * magnitude + digits + 1e-6;
}

struct Split {
    std::vector<std::int8_t> digits;
    std::vector<float> unit, sum;
};

// Splits all groups of x[n, w.cols], in two calls (the second half of the groups first) when
// `halves`, as the backend's threads may.
Split split_all(const WeightMatrix& w, const std::vector<float>& x, std::int64_t n, bool halves,
                SplitInt8Variant variant) {
    const std::int64_t groups = n * (w.cols / w.group_size);
    Split s;
    s.digits.assign(static_cast<std::size_t>(n * split_int8_token_bytes(w)), 99);
    s.unit.assign(static_cast<std::size_t>(groups), NAN);
    s.sum.assign(static_cast<std::size_t>(groups), NAN);
    if (halves) {
        split_activations_int8(variant, w, x.data(), groups / 2, groups, s.digits.data(),
                               s.unit.data(), s.sum.data());
        split_activations_int8(variant, w, x.data(), 0, groups / 2, s.digits.data(), s.unit.data(),
                               s.sum.data());
    } else {
        split_activations_int8(variant, w, x.data(), 0, groups, s.digits.data(), s.unit.data(),
                               s.sum.data());
    }
    return s;
}

TEST(SplitInt8, DigitsReconstructEveryActivationWithinHalfTheLastDigit) {
    SKIP_WITHOUT_VNNI();
    const int bits = 4;
    {
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
                const std::string what = std::string("q").append(std::to_string(bits)) + " g" +
                                         std::to_string(group) + " cols=" + std::to_string(cols);
                // Every variant's quantizer gives the same digits, in one call or two.
                const auto variants = split_int8_variants_available();
                const Split s = split_all(w.view, x, n, /*halves=*/false, variants.back());
                for (SplitInt8Variant v : variants) {
                    const Split h = split_all(w.view, x, n, /*halves=*/true, v);
                    ASSERT_EQ(s.digits, h.digits) << what << " " << split_int8_variant_name(v);
                    ASSERT_EQ(s.unit, h.unit) << what << " " << split_int8_variant_name(v);
                }
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
                        // Positions of the digits below d0 (the plan) and the value of d0. Digit
                        // k > 0 rounds a remainder of at most half the previous digit's place.
                        const int n_digits = kPlan.count;
                        const auto& p = kPlan.position;
                        const int last = p[n_digits - 1];
                        const double step = max_abs / 127.0;
                        EXPECT_NEAR(s.unit[gi], std::ldexp(step, -last), 1e-6 * s.unit[gi]) << what;
                        const double d0_value = std::ldexp(s.unit[gi], last);
                        EXPECT_NEAR(s.sum[gi], sum, 1e-5 * max_abs * group) << what;
                        for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
                            double back = 0.0;
                            bool in_range = true;
                            std::string digits_seen;
                            for (int k = 0; k < n_digits; ++k) {
                                const int d = digit(s.digits, w.view, t, c, k);
                                back += d0_value * std::ldexp(d, -p[k]);
                                const int limit = k == 0 ? 127 : 1 << (p[k] - p[k - 1] - 1);
                                in_range &= std::abs(d) <= limit;
                                digits_seen.append(1, ' ').append(std::to_string(d));
                            }
                            const double err = std::abs(back - x[t * cols + c]);
                            // Half the last digit, plus the f32 rounding of the first
                            // remainder (2^-24 of half a step: under 1/8 of that).
                            const double bound = std::ldexp(d0_value, -last - 1) * 1.2;
                            if (!in_range || !(err <= bound)) {
                                ++failures;
                                ADD_FAILURE()
                                    << what << " t=" << t << " c=" << c << " x=" << x[t * cols + c]
                                    << " digits" << digits_seen << " err=" << err
                                    << " unit=" << s.unit[gi];
                            }
                        }
                    }
                }
                // The padding of a partial last chunk is zero (it meets zero codes).
                const std::int64_t elems = 128;
                if (cols % elems != 0) {
                    for (std::int64_t t = 0; t < n; ++t) {
                        for (std::int64_t e = cols; e < (cols / elems + 1) * elems; ++e) {
                            for (int k = 0; k < kPlan.count; ++k) {
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
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        const CpuTuning tuning = split_tuning(variant);
        CpuBackend cpu(BackendOptions{2}, tuning);
        for (int group : {32, 64, 128}) {
            auto w = test::make_quant_weight(4, group, DType::kBF16, 11, 256, 6, 1);
            // One token at a time (the split path takes one): all zero, then one huge lane per
            // group of 64 among tiny ones.
            std::vector<float> zero(256, 0.0f), huge(256);
            for (int c = 0; c < 256; ++c) huge[c] = c % 64 == 9 ? -1e30f : 1e-30f;
            std::vector<float> y(11), expect(11);
            cpu.matmul(w.view, zero.data(), 1, y.data());
            for (int r = 0; r < 11; ++r) EXPECT_EQ(y[r], 0.0f) << "group=" << group << " r=" << r;
            cpu.matmul(w.view, huge.data(), 1, y.data());
            ref->matmul(w.view, huge.data(), 1, expect.data());
            expect_relative(y, expect, variant, group);
        }
    }
}

// Activations far below their group's largest one live in the last digit alone: each group's
// element 0 is 1 (step 1/127) and meets a zero code and zero bias; the others are k · unit,
// |k| <= 16, so every digit but the last is 0 and the last is k exactly, and the output is
// Σ scale · q · k · unit.
// A kernel that mixed up the last digit's even and odd halves or positions gets it wrong by
// its own size, where elsewhere that digit hides under the f32 tolerance.
TEST(SplitInt8, TheLastDigitAloneCarriesTheSmallActivations) {
    SKIP_WITHOUT_VNNI();
    auto ref = make_backend(BackendKind::kReference).value();
    const std::int64_t rows = 9, cols = 384;
    for (int group : {32, 64, 128}) {
        auto w = test::make_quant_weight(4, group, DType::kBF16, rows, cols, 11, 0);
        std::fill(w.biases.begin(), w.biases.end(), std::uint8_t{0});
        auto* codes = static_cast<std::uint8_t*>(const_cast<void*>(w.view.data));
        for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t c = 0; c < cols; c += group) codes[(r * cols + c) / 2] &= 0xF0;
        }
        const float unit = 1.0f / 127.0f * kPlan.unit_in_steps();
        std::vector<float> x(static_cast<std::size_t>(cols));
        for (std::int64_t c = 0; c < cols; ++c) {
            x[c] = c % group == 0 ? 1.0f : static_cast<float>((c * 7) % 33 - 16) * unit;
        }
        std::vector<float> expect(rows), y(rows);
        ref->matmul(w.view, x.data(), 1, expect.data());
        for (SplitInt8Variant variant : split_int8_variants_available()) {
            const CpuTuning tuning = split_tuning(variant);
            CpuBackend cpu(BackendOptions{2}, tuning);
            cpu.matmul(w.view, x.data(), 1, y.data());
            expect_relative(y, expect, variant, group);
        }
    }
}

// The largest sums the kernels meet: every code 15 against activations that are each their
// group's largest in magnitude (d0 = +-127, no remainder), so a dot product's pairs reach 15 x
// 127 x 2 and the AVX2 kernel's i16 sum of two such pairs 7620, all of one sign within a group.
// A kernel that saturated in i16 would be off by far more than the f32 tolerance. Where the CPU
// has AVX-VNNI too, the AVX2 kernel (vpmaddubsw + vpmaddwd) gives its floats bit for bit, on
// these rows and on random ones.
TEST(SplitInt8, FullCodesAndDigitsSumExactlyAndTheAvx2KernelMatchesAvxVnni) {
    SKIP_WITHOUT_VNNI();
    auto ref = make_backend(BackendKind::kReference).value();
    const std::int64_t rows = 7, cols = 352;
    const auto variants = split_int8_variants_available();
    for (int group : {32, 64, 128}) {
        if (cols % group != 0) continue;
        auto full = test::make_quant_weight(4, group, DType::kBF16, rows, cols, 17, 1);
        auto* codes = static_cast<std::uint8_t*>(const_cast<void*>(full.view.data));
        std::fill(codes, codes + rows * cols / 2, std::uint8_t{0xFF});
        std::vector<float> x(static_cast<std::size_t>(cols));
        for (std::int64_t c = 0; c < cols; ++c) {
            const std::int64_t g = c / group;
            x[c] = (g % 2 == 0 ? 1.0f : -1.0f) * std::pow(10.0f, static_cast<float>(g % 5) - 2.0f);
        }
        const auto random = test::make_quant_weight(4, group, DType::kBF16, rows, cols, 19, 1);
        const auto xr = test::random_floats(static_cast<std::size_t>(cols), 23);
        std::vector<float> expect(rows), y(rows), avx2_full, avx2_random;
        ref->matmul(full.view, x.data(), 1, expect.data());
        for (SplitInt8Variant variant : variants) {
            const CpuTuning tuning = split_tuning(variant);
            CpuBackend cpu(BackendOptions{2}, tuning);
            cpu.matmul(full.view, x.data(), 1, y.data());
            expect_relative(y, expect, variant, group);
            std::vector<float> yr(rows);
            cpu.matmul(random.view, xr.data(), 1, yr.data());
            if (variant == SplitInt8Variant::kAvx2) {
                avx2_full = y;
                avx2_random = yr;
            } else if (variant == SplitInt8Variant::kAvxVnni && !avx2_full.empty()) {
                EXPECT_EQ(std::memcmp(y.data(), avx2_full.data(), rows * sizeof(float)), 0)
                    << "group=" << group;
                EXPECT_EQ(std::memcmp(yr.data(), avx2_random.data(), rows * sizeof(float)), 0)
                    << "group=" << group;
            }
        }
    }
}

// 8-bit rows take the kernel where it has VNNI (AVX-512 VNNI, AVX-VNNI), not with AVX2 alone
// (its i16 pairs of whole-byte codes would saturate). Every code 255 against activations that
// are their groups' largest (the largest sums; their digits are exact), within 1e-5 of Σ|x·w|
// of the reference (f32 reordering), and random rows within 3e-5 (plus the digits' 2^-8 of a
// step); rows of 32 x odd columns end in half a chunk. Where AVX-512 runs, the AVX2 quantizer's
// 8-bit digits and units are its bit for bit (the AVX-VNNI kernel takes them).
TEST(SplitInt8, EightBitRowsWithVnniMatchTheReferenceAndTheAvx2QuantizerGivesAvx512sDigits) {
    SKIP_WITHOUT_VNNI();
    auto ref = make_backend(BackendKind::kReference).value();
    const std::int64_t rows = 9;
    const auto variants = split_int8_variants_available();
    int ran = 0;
    for (int group : {32, 64, 128}) {
        for (std::int64_t cols : {352, 384, 896}) {
            if (cols % group != 0) continue;
            auto full = test::make_quant_weight(8, group, DType::kBF16, rows, cols, 29, 1);
            auto* codes = static_cast<std::uint8_t*>(const_cast<void*>(full.view.data));
            std::fill(codes, codes + rows * cols, std::uint8_t{0xFF});
            for (std::int64_t i = 0; i < rows * cols; ++i) {  // dense: scale · 255 + bias
                const auto at = static_cast<std::size_t>(i);
                full.dense[at] += full.group_scale[static_cast<std::size_t>(i / group)] *
                                  static_cast<float>(255 - full.codes[at]);
            }
            std::vector<float> x(static_cast<std::size_t>(cols));
            for (std::int64_t c = 0; c < cols; ++c) {
                const std::int64_t g = c / group;
                x[c] =
                    (g % 2 == 0 ? 1.0f : -1.0f) * std::pow(10.0f, static_cast<float>(g % 5) - 2.0f);
            }
            auto random = test::make_quant_weight(8, group, DType::kF16, rows, cols, 31, 0);
            auto xr = test::random_floats(static_cast<std::size_t>(cols), 37);
            std::vector<float> expect(rows), expect_r(rows);
            ref->matmul(full.view, x.data(), 1, expect.data());
            ref->matmul(random.view, xr.data(), 1, expect_r.data());
            for (SplitInt8Variant variant : variants) {
                const bool vnni = variant == SplitInt8Variant::kAvx512Vnni ||
                                  variant == SplitInt8Variant::kAvxVnni;
                EXPECT_EQ(split_int8_kernel_supports(full.view, variant), vnni)
                    << split_int8_variant_name(variant);
                if (!vnni) continue;
                ++ran;
                CpuBackend cpu(BackendOptions{2}, split_tuning(variant));
                for (const auto& [w, xv, e, share] : {std::tuple{&full, &x, &expect, 1e-5},
                                                      std::tuple{&random, &xr, &expect_r, 3e-5}}) {
                    std::vector<float> y(rows);
                    cpu.matmul(w->view, xv->data(), 1, y.data());
                    for (std::int64_t r = 0; r < rows; ++r) {
                        double magnitude = 0.0;
                        for (std::int64_t c = 0; c < cols; ++c) {
                            magnitude += std::abs(double{(*xv)[c]} * w->dense[r * cols + c]);
                        }
                        EXPECT_NEAR(y[r], (*e)[r], share * magnitude + 1e-6)
                            << split_int8_variant_name(variant) << " group=" << group
                            << " cols=" << cols << " r=" << r << (w == &full ? " full" : " random");
                    }
                }
            }
#if BRIGADE_INT8_X86
            if (std::find(variants.begin(), variants.end(), SplitInt8Variant::kAvx512Vnni) !=
                variants.end()) {
                const std::int64_t n = 2, groups = n * (cols / group);
                const auto xs = test::random_floats(static_cast<std::size_t>(n * cols), 41);
                Split wide, narrow;
                for (Split* s : {&wide, &narrow}) {
                    s->digits.assign(
                        static_cast<std::size_t>(n * split_int8_token_bytes(random.view)), 99);
                    s->unit.assign(static_cast<std::size_t>(groups), NAN);
                    s->sum.assign(static_cast<std::size_t>(groups), NAN);
                }
                split_int8::split8_avx512(random.view, xs.data(), 0, groups, wide.digits.data(),
                                          wide.unit.data(), wide.sum.data());
                split_int8::split8_avx2(random.view, xs.data(), 0, groups, narrow.digits.data(),
                                        narrow.unit.data(), narrow.sum.data());
                EXPECT_EQ(wide.digits, narrow.digits) << "group=" << group << " cols=" << cols;
                EXPECT_EQ(wide.unit, narrow.unit) << "group=" << group << " cols=" << cols;
                for (std::int64_t i = 0; i < groups; ++i) {
                    EXPECT_NEAR(narrow.sum[i], wide.sum[i], 1e-5 * group) << "i=" << i;
                }
            }
#endif
        }
    }
    if (ran == 0) GTEST_SKIP() << "no VNNI here: 8-bit rows keep the f32 kernels";
}

// Rows of 8k columns or more quantize their activations over the pool: the same bits as one
// thread, and the reference's products within the f32 tolerance plus the digits' bound.
TEST(SplitInt8, WideRowsQuantizedOverThePoolGiveTheSameBits) {
    SKIP_WITHOUT_VNNI();
    auto ref = make_backend(BackendKind::kReference).value();
    const std::int64_t rows = 9, cols = 8192 + 128;
    auto w = test::make_quant_weight(4, 64, DType::kBF16, rows, cols, 13, 1);
    const auto x = test::random_floats(static_cast<std::size_t>(cols), 21);
    std::vector<float> expect(rows);
    ref->matmul(w.view, x.data(), 1, expect.data());
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        std::vector<float> y1(rows), y3(rows);
        const CpuTuning tuning = split_tuning(variant);
        CpuBackend one(BackendOptions{1}, tuning), three(BackendOptions{3}, tuning);
        one.matmul(w.view, x.data(), 1, y1.data());
        three.matmul(w.view, x.data(), 1, y3.data());
        EXPECT_EQ(std::memcmp(y1.data(), y3.data(), rows * sizeof(float)), 0)
            << split_int8_variant_name(variant);
        for (std::int64_t r = 0; r < rows; ++r) {
            double magnitude = 0.0;
            for (std::int64_t c = 0; c < cols; ++c) {
                magnitude += std::abs(double{x[c]} * w.dense[r * cols + c]);
            }
            EXPECT_NEAR(y3[r], expect[r], 1e-5 * magnitude) << split_int8_variant_name(variant);
        }
    }
}

// Every count of groups per row from 1 to 17 (a pass's factors in vectors of 8 or 16 groups,
// the last ones partial), one token and a batch of three decode steps: within the digits'
// bound of the reference.
TEST(SplitInt8, EveryGroupCountPerRowMatchesTheReference) {
    SKIP_WITHOUT_VNNI();
    auto ref = make_backend(BackendKind::kReference).value();
    const std::int64_t rows = 5;
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        CpuTuning tuning = split_tuning(variant);
        tuning.amx = false;
        CpuBackend cpu(BackendOptions{1}, tuning);
        cpu.set_rows_are_decode_steps(true);
        for (int group : {32, 64}) {
            for (std::int64_t n_groups = 1; n_groups <= 17; ++n_groups) {
                const std::int64_t cols = n_groups * group;
                const auto w = test::make_quant_weight(4, group, DType::kBF16, rows, cols,
                                                       static_cast<std::uint32_t>(n_groups), 0);
                for (const std::int64_t n : {1, 3}) {
                    const auto x = test::random_floats(static_cast<std::size_t>(n * cols), 7);
                    std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                    cpu.matmul(w.view, x.data(), n, y.data());
                    for (std::int64_t t = 0; t < n; ++t) {
                        const std::vector<float> xt(x.begin() + t * cols,
                                                    x.begin() + (t + 1) * cols);
                        std::vector<float> expect(rows);
                        ref->matmul(w.view, xt.data(), 1, expect.data());
                        for (std::int64_t r = 0; r < rows; ++r) {
                            EXPECT_NEAR(y[t * rows + r], expect[r], gemv_tolerance(w, xt, r))
                                << split_int8_variant_name(variant) << " group=" << group
                                << " groups=" << n_groups << " n=" << n << " t=" << t << " r=" << r;
                        }
                    }
                }
            }
        }
    }
}

// Weights are memory-mapped: a row ending a file's last page must not be read past. The codes
// of a 96-column matrix (48 bytes a row, a short last chunk) end where an inaccessible page
// begins; a read past them faults.
TEST(SplitInt8, ReadsNoCodeBytePastTheLastRow) {
    SKIP_WITHOUT_VNNI();
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    auto* bytes = static_cast<std::uint8_t*>(mem);
    ASSERT_EQ(mprotect(bytes + page, page, PROT_NONE), 0);
    const std::int64_t rows = 9, cols = 96;
    auto w = test::make_quant_weight(4, 32, DType::kBF16, rows, cols, 7, 0);
    const std::size_t code_bytes = static_cast<std::size_t>(rows * cols / 2);
    std::uint8_t* codes = bytes + page - code_bytes;
    std::memcpy(codes, w.view.data, code_bytes);
    WeightMatrix at_end = w.view;
    at_end.data = codes;
    const auto x = test::random_floats(cols, 3);
    auto ref = make_backend(BackendKind::kReference).value();
    std::vector<float> y(rows), expect(rows);
    ref->matmul(w.view, x.data(), 1, expect.data());
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        Split s = split_all(at_end, x, 1, false, variant);
        gemv_rows_split_int8(variant, at_end, {s.digits.data(), s.unit.data(), s.sum.data(), 0}, 0,
                             rows, nullptr, y.data());
        for (std::int64_t r = 0; r < rows; ++r) {
            EXPECT_NEAR(y[r], expect[r], gemv_tolerance(w, x, r))
                << split_int8_variant_name(variant) << " " << r;
        }
    }
    munmap(mem, 2 * page);
}

TEST(SplitInt8, ANanActivationMakesTheOutputsNan) {
    SKIP_WITHOUT_VNNI();
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        const CpuTuning tuning = split_tuning(variant);
        CpuBackend cpu(BackendOptions{1}, tuning);
        auto w = test::make_quant_weight(4, 64, DType::kBF16, 5, 128, 2, 0);
        auto x = test::random_floats(128, 4);
        x[70] = NAN;
        std::vector<float> y(5);
        cpu.matmul(w.view, x.data(), 1, y.data());
        for (float v : y) EXPECT_TRUE(std::isnan(v)) << split_int8_variant_name(variant) << v;
    }
}

}  // namespace
}  // namespace brigade::model::cpu
