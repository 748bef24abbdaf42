// CpuBackend::matmul against the reference backend on odd shapes, every weight
// format, unaligned data, 1-3 threads, both the fused decode kernels and the panel GEMM path
// (with and without BLAS), and every Highway target this machine can run.
//
// Tolerance: |cpu - ref| <= 1e-5 * sum_c |x_c * w_rc| + 1e-6 per output. Both sides sum in
// f32 in different orders; the bound on that difference is about cols * 2^-24 * sum|terms|
// (3e-5 relative for 384 columns at worst, typically 100x less), so 1e-5 catches any wrong
// element or dropped block while allowing reordering.
//
// The int16-activation decode path (matmul_int16.cpp) additionally rounds each x to a step of
// max|x_g|/32767 per weight group g; its tolerance adds the exact worst case of that rounding,
// sum_g scale_g * step_g / 2 * sum_{c in g} q_c, computed here from the codes. The split-int8
// GEMV (matmul_split_int8*.cpp: AVX-512 VNNI, AVX-VNNI or Arm sdot; 4-bit, one and two tokens)
// rounds to max|x_g|/(127 * 2^7) (two digits) and the AMX tiles to max|x_g|/(127 * 2^17) (four);
// each adds the same term for its step.

#include <gtest/gtest.h>
// clang-format off
// First, so that HWY_TARGETS here is the kernels' set of targets.
#include "model/cpu/simd_targets.hpp"
#include <hwy/targets.h>
// clang-format on

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/matmul_split_int8.hpp"  // the digit plans
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

std::unique_ptr<Backend> reference() { return make_backend(BackendKind::kReference).value(); }

struct Case {
    std::string what;
    test::OwnedWeight w;
};

std::vector<Case> all_formats(std::int64_t rows, int misalign) {
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
double rounding_levels(Rounding rounding) {
    if (rounding == Rounding::kInt16) return 32767.0;
    const auto& plan =
        rounding == Rounding::kAmx ? split_int8::kAmxDigits : split_int8::kGemvDigits;
    return 127.0 / plan.unit_in_steps();
}

// Worst-case error of rounded activations for output (t, r), see the file comment.
double rounding_bound(const test::OwnedWeight& w, const std::vector<float>& x, std::int64_t t,
                      std::int64_t r, Rounding rounding) {
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
void expect_close_matmul(const test::OwnedWeight& w, const std::vector<float>& x, std::int64_t n,
                         const std::vector<float>& y, const std::vector<float>& ref,
                         const std::string& what, Rounding rounding = Rounding::kNone) {
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

void run_matmul_cases(Backend& cpu, const std::string& label,
                      std::initializer_list<std::int64_t> ns, Rounding rounding = Rounding::kNone) {
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

// 4- and 8-bit weights take the per-group factored kernel (matmul_grouped.cpp), the other
// widths the plain fused kernel.
TEST(CpuMatmul, DecodeKernelsF32ActivationsAllFormatsAndThreadCounts) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = false;
    for (int threads : {1, 2, 3}) {
        CpuBackend cpu(BackendOptions{threads}, tuning);
        run_matmul_cases(cpu, "f32 threads=" + std::to_string(threads), {1, 2, 3, 4, 5, 9, 15, 24});
    }
}

// Batches of 5-16 tokens (the limits forced up to 16 here), on every compiled target: 4- and
// 8-bit weights through the grouped kernels' token tiles (AVX-512: 2 rows x up to 8 tokens;
// the portable ones: 1 or 2 rows x up to 8), BF16 and F16 rows through gemv_rows_plain_tiles
// (2 rows x up to 8 or 4 tokens, odd column counts for the scalar tail). Token blocks of every size
// (5, 9 = 8 + 1, 16 = 8 + 8), rows left over by the 2-row tiles and the 16-row spans, each group
// size, bias. Every (row, token) output is one chain over the columns, so every split of the rows
// over 1-7 threads gives the same bits, close to the reference.
TEST(CpuMatmul, BatchesOf5To16GiveTheSameBitsForEveryRowSplit) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = false;
    tuning.amx = false;
    tuning.grouped_max_tokens = 16;  // two token blocks of the tiles too
    tuning.plain_tiles_max_tokens = 16;
    auto ref = reference();
    std::vector<Case> cases;
    cases.push_back({"bf16 cols=1043", test::make_plain_weight(DType::kBF16, 37, 1043, 31, 2)});
    cases.push_back({"f16 cols=101", test::make_plain_weight(DType::kF16, 37, 101, 32, 1)});
    for (int bits : {4, 8}) {
        for (int group : {32, 64, 128}) {
            const std::int64_t cols = group == 32 ? 352 : 640;
            cases.push_back(
                {std::string("q").append(std::to_string(bits)) + " g" + std::to_string(group),
                 test::make_quant_weight(bits, group, DType::kBF16, 37, cols,
                                         static_cast<std::uint32_t>(bits + group), 1)});
        }
    }
    const auto bias = test::random_floats(37, 5);
    const WeightVector b{DType::kF32, 37, bias.data()};
    for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        for (const auto& c : cases) {
            for (std::int64_t n : {5, 7, 8, 9, 13, 16}) {
                const auto rows = c.w.view.rows;
                const auto x = test::random_floats(static_cast<std::size_t>(n * c.w.view.cols),
                                                   static_cast<std::uint32_t>(n + 3));
                std::vector<float> expect(static_cast<std::size_t>(n * rows));
                ref->matmul(c.w.view, x.data(), n, expect.data());
                for (std::int64_t t = 0; t < n; ++t) {
                    for (std::int64_t r = 0; r < rows; ++r) {
                        expect[static_cast<std::size_t>(t * rows + r)] +=
                            bias[static_cast<std::size_t>(r)];
                    }
                }
                std::vector<float> first;
                for (int threads : {1, 2, 3, 7}) {
                    CpuBackend cpu(BackendOptions{threads}, tuning);
                    std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                    cpu.matmul(c.w.view, x.data(), n, y.data(), &b);
                    const std::string what = c.what + " n=" + std::to_string(n) +
                                             " threads=" + std::to_string(threads) + " " +
                                             hwy::TargetName(target);
                    expect_close_matmul(c.w, x, n, y, expect, what);
                    if (first.empty()) {
                        first = y;
                    } else {
                        EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
                            << what;
                    }
                }
            }
        }
    }
    hwy::SetSupportedTargetsForTest(0);
}

// The grouped kernels and the BF16/F16 tiles take batches up to 16 tokens only where their
// AVX-512 token tiles run on an AMD CPU (sessions 25-26: ahead of the dot tiles there up to 16,
// the grouped ones behind from 12 on Intel), and the limit follows the kernels' target, so
// `--isa avx2` on such a CPU gets 8.
TEST(CpuMatmul, GroupedBatchLimitFollowsTheVendorAndTheTarget) {
    const std::int64_t expected = cpu_vendor_is_amd() && grouped_token_tiles_available() ? 16 : 8;
    EXPECT_EQ(default_grouped_max_tokens(), expected);
    EXPECT_EQ(default_plain_tiles_max_tokens(), expected);
    for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        const bool avx512 = target == HWY_AVX3 || target == HWY_AVX3_DL;
        EXPECT_EQ(grouped_token_tiles_available(), avx512) << hwy::TargetName(target);
        EXPECT_EQ(default_grouped_max_tokens(), cpu_vendor_is_amd() && avx512 ? 16 : 8)
            << hwy::TargetName(target);
        EXPECT_EQ(default_plain_tiles_max_tokens(), cpu_vendor_is_amd() && avx512 ? 16 : 8)
            << hwy::TargetName(target);
    }
    hwy::SetSupportedTargetsForTest(0);
}

// The plain fused kernel on every width, 4 and 8 bits included.
// Batched decode (register tiles of rows x 4 tokens over rows decoded to f32) on rows wider
// than the small cases above, with a scalar column tail, and with more tokens than the default
// gemm_min_tokens lets through (raised here so 33 and 40 tokens still decode).
TEST(CpuMatmul, BatchedDecodeOnWideRowsAndManyTokens) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = false;
    tuning.gemm_min_tokens = 64;
    auto ref = reference();
    std::vector<Case> cases;
    cases.push_back({"f32 cols=1100", test::make_plain_weight(DType::kF32, 9, 1100, 11, 1)});
    cases.push_back({"bf16 cols=1043", test::make_plain_weight(DType::kBF16, 13, 1043, 12, 2)});
    cases.push_back(
        {"q4 g64 cols=1152", test::make_quant_weight(4, 64, DType::kBF16, 9, 1152, 13, 3)});
    cases.push_back(
        {"q8 g32 cols=1056", test::make_quant_weight(8, 32, DType::kF16, 13, 1056, 14, 0)});
    cases.push_back(
        {"q5 g128 cols=1152", test::make_quant_weight(5, 128, DType::kF32, 6, 1152, 15, 1)});
    for (int threads : {1, 3}) {
        CpuBackend cpu(BackendOptions{threads}, tuning);
        for (const auto& c : cases) {
            for (std::int64_t n : {6, 33, 40}) {
                const auto rows = c.w.view.rows;
                const auto x = test::random_floats(static_cast<std::size_t>(n * c.w.view.cols),
                                                   static_cast<std::uint32_t>(n));
                std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                std::vector<float> expect(y.size());
                cpu.matmul(c.w.view, x.data(), n, y.data());
                ref->matmul(c.w.view, x.data(), n, expect.data());
                expect_close_matmul(c.w, x, n, y, expect,
                                    "threads=" + std::to_string(threads) + " " + c.what);
            }
        }
    }
}

// Batched decode with the tokens along the vector (forced here from 5 tokens, on any target)
// sums every output over the columns in order, whatever rows share its register tile, so every
// thread count (a different split of the rows) gives the same bits; the dot tiles that the
// other batches take stay correct.
TEST(CpuMatmul, BatchedDecodeGivesTheSameBitsForEveryRowSplit) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = false;
    tuning.batched_min_tokens = 5;
    std::vector<Case> cases;
    cases.push_back({"bf16 cols=1043", test::make_plain_weight(DType::kBF16, 45, 1043, 21, 2)});
    cases.push_back(
        {"q4 g64 cols=1152", test::make_quant_weight(4, 64, DType::kBF16, 45, 1152, 22, 3)});
    cases.push_back(
        {"q8 g128 cols=640", test::make_quant_weight(8, 128, DType::kF16, 45, 640, 23, 1)});
    auto ref = reference();
    CpuTuning dot_tiles = tuning;
    dot_tiles.batched_min_tokens = 1000;
    dot_tiles.grouped_max_tokens = 4;      // quantized batches too
    dot_tiles.plain_tiles_max_tokens = 4;  // and BF16 rows
    CpuBackend dot_cpu(BackendOptions{2}, dot_tiles);
    for (const auto& c : cases) {
        for (std::int64_t n : {5, 8, 13, 31}) {
            const auto rows = c.w.view.rows;
            const auto x = test::random_floats(static_cast<std::size_t>(n * c.w.view.cols),
                                               static_cast<std::uint32_t>(n + 7));
            std::vector<float> expect(static_cast<std::size_t>(n * rows));
            ref->matmul(c.w.view, x.data(), n, expect.data());
            std::vector<float> first;
            for (int threads : {1, 2, 3, 7}) {
                CpuBackend cpu(BackendOptions{threads}, tuning);
                std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
                cpu.matmul(c.w.view, x.data(), n, y.data());
                const std::string what = c.what + " threads=" + std::to_string(threads);
                expect_close_matmul(c.w, x, n, y, expect, what);
                if (first.empty()) {
                    first = y;
                } else {
                    EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
                        << what << " n=" << n;
                }
            }
            std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
            dot_cpu.matmul(c.w.view, x.data(), n, y.data());
            expect_close_matmul(c.w, x, n, y, expect, "dot tiles " + c.what);
        }
    }
}

TEST(CpuMatmul, DecodeKernelsPlainFusedAllFormats) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = false;
    tuning.grouped_quant = false;
    for (int threads : {1, 3}) {
        CpuBackend cpu(BackendOptions{threads}, tuning);
        run_matmul_cases(cpu, "fused threads=" + std::to_string(threads), {1, 3, 4, 5, 9});
    }
}

// Many rows over few threads with row counts that do not divide evenly: every row is written
// exactly once by the balanced split (NaN-filled output catches a skipped row).
TEST(CpuMatmul, BalancedSplitCoversEveryRow) {
    auto ref = reference();
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = false;
    for (int threads : {2, 3}) {
        CpuBackend cpu(BackendOptions{threads}, tuning);
        for (std::int64_t rows : {1, 2, 3, 47, 191, 193}) {
            for (int bits : {0, 4, 8}) {
                const auto w = bits == 0
                                   ? test::make_plain_weight(DType::kBF16, rows, 64, 3, 0)
                                   : test::make_quant_weight(bits, 64, DType::kBF16, rows, 128,
                                                             static_cast<std::uint32_t>(rows), 1);
                const auto x = test::random_floats(static_cast<std::size_t>(w.view.cols), 11);
                std::vector<float> y(static_cast<std::size_t>(rows), NAN), expect(y.size());
                cpu.matmul(w.view, x.data(), 1, y.data());
                ref->matmul(w.view, x.data(), 1, expect.data());
                expect_close_matmul(w, x, 1, y, expect,
                                    "split threads=" + std::to_string(threads) + " rows=" +
                                        std::to_string(rows) + " bits=" + std::to_string(bits));
            }
        }
    }
}

TEST(CpuMatmul, DecodeKernelsInt16ActivationsAllFormatsAndThreadCounts) {
    for (int threads : {1, 2, 3}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        run_matmul_cases(cpu, "int16 threads=" + std::to_string(threads), {1, 2, 3, 4, 5, 9, 15},
                         Rounding::kInt16);
    }
}

// Split-int8 activations on instruction set `variant`, nothing else opted in.
CpuTuning split_int8_tuning(SplitInt8Variant variant) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_variant = variant;
    return tuning;
}

// Split-int8 activations, each instruction set this CPU runs (AVX-512 VNNI, AVX-VNNI): every
// format the kernel takes (4-bit, one and two tokens), partial chunks (rows of 96, 160 and 352
// columns), 1-3 threads; the other formats and n > 2 take the f32 kernels or AMX tiles.
TEST(CpuMatmul, DecodeKernelsSplitInt8AllFormatsAndThreadCounts) {
    if (split_int8_variants_available().empty())
        GTEST_SKIP() << "this CPU has neither AVX-512 VNNI nor AVX-VNNI: no split-int8 kernel";
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        const CpuTuning tuning = split_int8_tuning(variant);
        for (int threads : {1, 2, 3}) {
            CpuBackend cpu(BackendOptions{threads}, tuning);
            run_matmul_cases(cpu,
                             std::string("split-int8 ") + split_int8_variant_name(variant) +
                                 " threads=" + std::to_string(threads),
                             {1, 2, 3, 4, 5, 9}, Rounding::kSplitInt8);
        }
    }
}

// Two tokens on 4-bit weights (and 8-bit ones with AVX-512) go through the split-int8 kernel
// (CpuTuning::split_int8_max_tokens; AVX-512 takes both in one pass over the codes, the others
// one token after the other): each gets the bits it gets alone, on any thread count, for every
// group size and kernel variant.
TEST(CpuMatmul, SplitInt8TwoTokensGiveEachTheBitsOfOneAlone) {
    if (split_int8_variants_available().empty())
        GTEST_SKIP() << "this CPU has neither AVX-512 VNNI nor AVX-VNNI: no split-int8 kernel";
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        CpuTuning tuning = split_int8_tuning(variant);
        tuning.split_int8_max_tokens = 2;
        for (const auto& [bits, group] : {std::pair{4, 32}, std::pair{4, 64}, std::pair{4, 128},
                                          std::pair{8, 32}, std::pair{8, 64}, std::pair{8, 128}}) {
            auto w =
                test::make_quant_weight(bits, group, DType::kBF16, 75, 896, 60 + bits + group, 0);
            const auto x = test::random_floats(2 * 896, 11);
            for (int threads : {1, 3}) {
                CpuBackend cpu(BackendOptions{threads}, tuning);
                std::vector<float> both(2 * 75, NAN), first(75, NAN), second(75, NAN);
                cpu.matmul(w.view, x.data(), 2, both.data());
                cpu.matmul(w.view, x.data(), 1, first.data());
                cpu.matmul(w.view, x.data() + 896, 1, second.data());
                const std::string what = std::string(split_int8_variant_name(variant)) + " q" +
                                         std::to_string(bits) + " g" + std::to_string(group) +
                                         " threads=" + std::to_string(threads);
                EXPECT_EQ(std::memcmp(both.data(), first.data(), 75 * sizeof(float)), 0) << what;
                EXPECT_EQ(std::memcmp(both.data() + 75, second.data(), 75 * sizeof(float)), 0)
                    << what;
            }
        }
    }
}

// The row tiles' next-tile prefetch (CpuTuning::next_tile_prefetch_row_bytes) changes which
// lines are asked for ahead, never a float: every tiled one-token kernel (f32 grouped, int16,
// split-int8) gives the bits it gives without it, for rows under and over the limit, on 1 and 3
// threads (chunks end inside and at the matrix's end, where the next tile lies past the rows).
TEST(CpuMatmul, NextTilePrefetchChangesNoBits) {
    CpuTuning grouped;
    grouped.split_int8_activations = false;
    CpuTuning int16 = grouped;
    int16.int16_activations = true;
    std::vector<std::pair<std::string, CpuTuning>> tunings = {{"grouped", grouped},
                                                              {"int16", int16}};
    if (!split_int8_variants_available().empty()) tunings.emplace_back("split-int8", CpuTuning{});
    for (auto& [name, tuning] : tunings) {
        for (const auto& [bits, cols] :
             {std::pair{4, 896}, std::pair{8, 896}, std::pair{4, 2560}, std::pair{8, 2560}}) {
            auto w = test::make_quant_weight(bits, 64, DType::kBF16, 37, cols, bits + cols, 1);
            const auto x = test::random_floats(2 * static_cast<std::size_t>(cols), 17);
            for (int threads : {1, 3}) {
                for (std::int64_t n : {1, 2}) {
                    std::vector<float> plain(static_cast<std::size_t>(n * 37), NAN);
                    std::vector<float> next_tile(plain.size(), NAN);
                    tuning.next_tile_prefetch_row_bytes = 0;
                    CpuBackend(BackendOptions{threads}, tuning)
                        .matmul(w.view, x.data(), n, plain.data());
                    tuning.next_tile_prefetch_row_bytes = 2048;
                    CpuBackend(BackendOptions{threads}, tuning)
                        .matmul(w.view, x.data(), n, next_tile.data());
                    EXPECT_EQ(
                        std::memcmp(plain.data(), next_tile.data(), plain.size() * sizeof(float)),
                        0)
                        << name << " q" << bits << " cols=" << cols << " threads=" << threads
                        << " n=" << n;
                }
            }
        }
    }
}

// AMX tiles (matmul_amx.cpp) for 2-31 tokens and prompts: every format, 4- and 8-bit ones
// taking the kernel (groups of 32, 64 and 128, partial last tiles of rows, 1-3 threads). With
// four digits (prompt rows), 2-8 tokens are narrow blocks of 4 (5 and 8: two of them); with two
// (decode steps) narrow blocks of 8 (9: none, a wide block); 9-31 wide blocks of 16 (17 and 31:
// two), 33 and 70 prompts of 2 and 3 chunks, the last one partial. amx_min_tokens = 2 (with
// split_int8_max_tokens = 1) sends 2 tokens through the tiles too.
TEST(CpuMatmul, DecodeKernelsAmxAllFormatsAndThreadCounts) {
    if (!amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-INT8 tiles";
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_max_tokens = 1;
    tuning.amx_min_tokens = 2;
    tuning.amx_8bit_min_tokens = 2;
    tuning.amx_bf16_min_tokens = 2;
    tuning.amx_bf16_large_min_tokens = 2;
    for (int threads : {1, 2, 3}) {
        for (const bool decode_steps : {false, true}) {
            CpuBackend cpu(BackendOptions{threads}, tuning);
            cpu.set_rows_are_decode_steps(decode_steps);
            run_matmul_cases(cpu,
                             std::string(decode_steps ? "amx decode steps" : "amx prompt rows") +
                                 " threads=" + std::to_string(threads),
                             {2, 3, 5, 8, 9, 16, 17, 31, 33, 70},
                             decode_steps ? Rounding::kSplitInt8 : Rounding::kAmx);
        }
    }
}

// Rows of 4-bit, 8-bit and BF16 matrices (wide ones with more than one 16-row tile per thread,
// and a small model's: one and three groups, a partial chunk) give the same bits on 1, 3 and 7
// threads, and each token of a batch (3 and 7 tokens: one narrow block of two digits, or one and
// two of four; 19: two wide ones) is within f32 rounding of what the one-token split-int8 kernel
// gives it alone, plus the rounding of the less precise side. A batch of decode steps has the
// GEMV's two digits, the same ones for the same x, so its tokens differ from alone by f32
// rounding only.
void expect_amx_rows_split_and_alone(bool decode_steps) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    struct Shape {
        std::int64_t rows, cols;
    };
    // Wide rows, and a small model's (a partial chunk of 128 columns, one or three groups).
    for (const Shape shape : {Shape{83, 1152}, Shape{37, 64}, Shape{37, 192}})
        for (int bits : {4, 8, 16}) {
            for (int group : {32, 64, 128}) {
                if ((bits == 16 && group != 32) || shape.cols % group != 0) continue;
                const std::int64_t rows = shape.rows, cols = shape.cols;
                // bits 16: BF16 rows (AMX-BF16, matmul_amx_bf16.cpp).
                auto w = bits == 16 ? test::make_plain_weight(DType::kBF16, rows, cols, 57, 0)
                                    : test::make_quant_weight(bits, group, DType::kF16, rows, cols,
                                                              40 + bits + group, 0);
                for (const std::int64_t n : {3, 7, 19}) {
                    if (bits == 16 && n < 12) continue;  // BF16 takes the tiles from 12 tokens
                    const auto x = test::random_floats(static_cast<std::size_t>(n * cols), 9);
                    // 1, 3 and 7 threads, then 3 with each row's codes prefetched ahead instead of
                    // the next row block's (a prefetch changes no float).
                    std::vector<std::vector<float>> ys;
                    for (int run = 0; run < 4; ++run) {
                        CpuTuning run_tuning = tuning;
                        run_tuning.amx_prefetch_next_block = run < 3;
                        CpuBackend cpu(BackendOptions{run == 0 ? 1 : run == 2 ? 7 : 3}, run_tuning);
                        cpu.set_rows_are_decode_steps(decode_steps);
                        ys.emplace_back(static_cast<std::size_t>(n * rows), NAN);
                        cpu.matmul(w.view, x.data(), n, ys.back().data());
                    }
                    std::ostringstream what_stream;
                    if (bits == 16) {
                        what_stream << "bf16";
                    } else {
                        what_stream << "q" << bits << " g" << group;
                    }
                    what_stream << " " << rows << "x" << cols << " n=" << n
                                << (decode_steps ? " decode steps" : " prompt rows");
                    const std::string what = what_stream.str();
                    EXPECT_EQ(std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)),
                              0)
                        << what;
                    EXPECT_EQ(std::memcmp(ys[0].data(), ys[2].data(), ys[0].size() * sizeof(float)),
                              0)
                        << what;
                    EXPECT_EQ(std::memcmp(ys[0].data(), ys[3].data(), ys[0].size() * sizeof(float)),
                              0)
                        << what << " (rows prefetched ahead)";
                    CpuBackend cpu(BackendOptions{2}, tuning);
                    const bool alone_split = bits == 16 || split_int8_kernel_supports(w.view);
                    // Alone, 4-bit rows take the GEMV's two digits, and so do 8-bit ones with
                    // AVX-512 (f32 activations on other CPUs). The batch's rows take four digits
                    // (prompt rows) or the same two (decode steps, the same digits: only f32
                    // rounding apart). BF16 rows: f32 rounding in another order.
                    const Rounding alone_rounding =
                        bits == 16 || (decode_steps && alone_split)
                            ? Rounding::kNone
                            : (alone_split || decode_steps ? Rounding::kSplitInt8 : Rounding::kAmx);
                    for (std::int64_t t : {std::int64_t{0}, n / 2, n - 1}) {
                        std::vector<float> alone(static_cast<std::size_t>(rows));
                        cpu.matmul(w.view, x.data() + t * cols, 1, alone.data());
                        for (std::int64_t r = 0; r < rows; ++r) {
                            double magnitude = 0.0;
                            for (std::int64_t c = 0; c < cols; ++c) {
                                magnitude += std::abs(static_cast<double>(x[t * cols + c]) *
                                                      w.dense[r * cols + c]);
                            }
                            // Equal digits: f32 rounding of the group terms in another order,
                            // the sums of x for the biases included (1e-6, some 60 times below
                            // what two digits may round, so four digits in the batch fail it).
                            const double f32_rounding =
                                bits == 16 || (decode_steps && alone_rounding == Rounding::kNone)
                                    ? 1e-6
                                    : 2e-7;
                            const double tol = f32_rounding * magnitude +
                                               rounding_bound(w, x, t, r, alone_rounding);
                            EXPECT_NEAR(ys[0][t * rows + r], alone[r], tol)
                                << what << " t=" << t << " r=" << r;
                        }
                    }
                }
            }
        }
}

TEST(CpuMatmul, AmxRowsGiveTheSameBitsForEveryRowSplitAndMatchOneTokenAlone) {
    if (!amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-INT8 tiles";
    expect_amx_rows_split_and_alone(false);
}

TEST(CpuMatmul, AmxDecodeStepsGiveTheSameBitsForEveryRowSplitAndOneTokenAlonesDigits) {
    if (!amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-INT8 tiles";
    expect_amx_rows_split_and_alone(true);
}

// The three bf16 terms of every activation, read back through the documented tile layout
// (token block, 32-column step, term; B[k / 2][2t + k % 2]), sum to it within 2^-27 of it.
TEST(CpuMatmul, AmxBf16TermsSumToEachActivation) {
    if (!amx_bf16_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16 tiles";
    auto w = test::make_plain_weight(DType::kBF16, 3, 96, 1, 0);
    const std::int64_t n = 19, steps = 96 / 32;
    // BF16 blocks hold 16 tokens whatever the batch (the int8 kernel's narrow blocks of 4 do
    // not apply): 5 tokens take one block of 3 terms x 1 KiB tiles per step, 19 take two.
    EXPECT_EQ(amx_bf16_tile_bytes(w.view, 5), steps * 3 * 1024);
    EXPECT_EQ(amx_bf16_tile_bytes(w.view, n), 2 * steps * 3 * 1024);
    auto x = test::random_floats(static_cast<std::size_t>(n * 96), 5, -100.0f, 100.0f);
    x[7] = 1.0f + 0x1p-10f + 0x1p-19f + 0x1p-23f;  // needs all three terms
    std::vector<std::uint16_t> tiles(static_cast<std::size_t>(amx_bf16_tile_bytes(w.view, n) / 2),
                                     0xFFFF);
    prepare_amx_bf16_activations(w.view, x.data(), n, 0, steps, tiles.data());
    auto value = [](std::uint16_t h) {
        const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
        float f = 0.0f;
        std::memcpy(&f, &u, sizeof f);
        return static_cast<double>(f);
    };
    for (std::int64_t token = 0; token < 32; ++token) {  // two blocks; 19..31 are padding
        const std::int64_t tb = token / 16, t = token % 16;
        for (std::int64_t c = 0; c < 96; ++c) {
            const std::int64_t s = c / 32, k = c % 32;
            double sum = 0.0;
            for (std::int64_t j = 0; j < 3; ++j) {
                sum += value(tiles[static_cast<std::size_t>(((tb * steps + s) * 3 + j) * 512 +
                                                            (k / 2) * 32 + 2 * t + k % 2)]);
            }
            const double want = token < n ? x[static_cast<std::size_t>(token * 96 + c)] : 0.0;
            ASSERT_NEAR(sum, want, std::abs(want) * 0x1p-27) << "token " << token << " col " << c;
        }
    }
}

// A token whose activations are all zero gets exactly the bias; one with a huge lane in a group
// leaves the others within tolerance.
TEST(CpuMatmul, AmxHandlesZeroAndExtremeTokens) {
    if (!amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-INT8 tiles";
    auto ref = reference();
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.amx_min_tokens = 2;
    CpuBackend cpu(BackendOptions{2}, tuning);
    auto w = test::make_quant_weight(4, 64, DType::kBF16, 21, 256, 5, 1);
    std::vector<float> x(3 * 256, 0.0f);                                          // token 0: zero
    for (int c = 0; c < 256; ++c) x[256 + c] = c % 64 == 9 ? -1e30f : 1e-30f;     // token 1
    for (int c = 0; c < 256; ++c) x[512 + c] = static_cast<float>(c % 7) - 3.0f;  // token 2
    std::vector<float> y(3 * 21), expect(y.size());
    cpu.matmul(w.view, x.data(), 3, y.data());
    ref->matmul(w.view, x.data(), 3, expect.data());
    for (int r = 0; r < 21; ++r) EXPECT_EQ(y[r], 0.0f) << r;
    for (int r = 21; r < 63; ++r) {
        EXPECT_NEAR(y[r], expect[r], 1e-5 * std::abs(expect[r]) + 1e-6) << r;
        EXPECT_NE(expect[r], 0.0f) << r;
    }
}

TEST(CpuMatmul, BackendOptionsCanTurnInt16ActivationsOff) {
    auto ref = reference();
    BackendOptions options;
    options.n_threads = 2;
    options.cpu_int16_activations = false;
    auto cpu = make_backend(BackendKind::kCpu, options).value();
    auto w = test::make_quant_weight(4, 64, DType::kBF16, 33, 256, 8, 1);
    const auto x = test::random_floats(256, 3);
    std::vector<float> y(33), expect(33);
    cpu->matmul(w.view, x.data(), 1, y.data());
    ref->matmul(w.view, x.data(), 1, expect.data());
    expect_close_matmul(w, x, 1, y, expect, "f32 via BackendOptions", Rounding::kSplitInt8);
}

TEST(CpuMatmul, Int16ActivationsHandleZeroAndExtremeGroups) {
    auto ref = reference();
    CpuBackend cpu(BackendOptions{2}, CpuTuning{});
    auto w = test::make_quant_weight(4, 32, DType::kBF16, 7, 128, 5, 1);
    std::vector<float> x(2 * 128, 0.0f);                                      // token 0: all zero
    for (int c = 0; c < 128; ++c) x[128 + c] = c % 32 == 5 ? 1e30f : 1e-30f;  // one huge lane
    std::vector<float> y(2 * 7), expect(y.size());
    cpu.matmul(w.view, x.data(), 2, y.data());
    ref->matmul(w.view, x.data(), 2, expect.data());
    for (int r = 0; r < 7; ++r) EXPECT_EQ(y[r], 0.0f);
    for (int r = 0; r < 7; ++r) {
        EXPECT_NEAR(y[7 + r], expect[7 + r], 1e-5 * std::abs(expect[7 + r])) << r;
    }
}

// The same for the wide 4-bit layout (groups of 64, AVX-512's vectorized quantizer and row
// tiles): zero groups stay exactly zero, a huge lane leaves the others at zero.
TEST(CpuMatmul, Int16ActivationsHandleZeroAndExtremeGroupsInWideLayout) {
    auto ref = reference();
    CpuBackend cpu(BackendOptions{2}, CpuTuning{});
    auto w = test::make_quant_weight(4, 64, DType::kBF16, 11, 256, 6, 1);
    std::vector<float> x(256, 0.0f);
    for (int c = 128; c < 256; ++c) x[c] = c % 64 == 9 ? -1e30f : 1e-30f;  // groups 2, 3
    std::vector<float> y(11), expect(y.size());
    cpu.matmul(w.view, x.data(), 1, y.data());
    ref->matmul(w.view, x.data(), 1, expect.data());
    for (int r = 0; r < 11; ++r) {
        EXPECT_NEAR(y[r], expect[r], 1e-5 * std::abs(expect[r])) << r;
        EXPECT_NE(expect[r], 0.0f) << r;
    }
}

TEST(CpuMatmul, PrefillPanelsWithBlas) {
    for (int threads : {1, 3}) {
        CpuTuning tuning;
        tuning.max_panel_rows = 16;   // several panels even for 37 rows
        tuning.gemm_min_tokens = 16;  // 17 tokens take the panels too
        CpuBackend cpu(BackendOptions{threads}, tuning);
        run_matmul_cases(cpu, "blas threads=" + std::to_string(threads), {17, 70});
    }
}

TEST(CpuMatmul, PrefillPanelsWithoutBlas) {
    CpuTuning tuning;
    tuning.use_blas = false;
    tuning.max_panel_rows = 8;
    tuning.gemm_min_tokens = 16;
    CpuBackend cpu(BackendOptions{2}, tuning);
    run_matmul_cases(cpu, "no-blas", {17, 70});
}

// Every path adds the bias: fused decode (n <= 4; int16 and grouped f32 for 4-bit, plain for
// BF16), batched row tiles (n = 7) and panels (n = 40).
TEST(CpuMatmul, BiasIsAddedInAllPaths) {
    auto ref = reference();
    CpuTuning grouped;
    grouped.int16_activations = false;
    grouped.split_int8_activations = false;
    for (DType bias_dtype : {DType::kF32, DType::kBF16}) {
        for (const bool quantized : {true, false}) {
            for (const CpuTuning& tuning : {CpuTuning{}, grouped}) {
                auto w = quantized ? test::make_quant_weight(4, 64, DType::kBF16, 37, 128, 3, 1)
                                   : test::make_plain_weight(DType::kBF16, 37, 128, 3, 1);
                std::vector<std::uint8_t> bias_bytes(37 * 4 + 3);
                const auto bias_values = test::random_floats(37, 4, -3.0f, 3.0f);
                const std::size_t elem = bias_dtype == DType::kF32 ? 4 : 2;
                for (std::size_t i = 0; i < 37; ++i) {
                    test::store_scalar(bias_dtype, bias_values[i],
                                       bias_bytes.data() + 3 + i * elem);
                }
                const WeightVector bias{bias_dtype, 37, bias_bytes.data() + 3};
                for (std::int64_t n : {1, 2, 7, 40}) {
                    CpuBackend cpu(BackendOptions{2}, tuning);
                    const auto x = test::random_floats(static_cast<std::size_t>(n * 128), 5);
                    std::vector<float> y(static_cast<std::size_t>(n * 37)), expect(y.size());
                    cpu.matmul(w.view, x.data(), n, y.data(), &bias);
                    ref->matmul(w.view, x.data(), n, expect.data(), &bias);
                    for (std::size_t i = 0; i < y.size(); ++i) {
                        ASSERT_NEAR(y[i], expect[i], 1e-4)
                            << "n=" << n << " i=" << i << " quantized=" << quantized;
                    }
                }
            }
        }
    }
}

TEST(CpuMatmul, EveryHighwayTargetAgrees) {
    auto ref = reference();
    const auto targets = hwy::SupportedAndGeneratedTargets();
    ASSERT_FALSE(targets.empty());
    CpuTuning grouped;
    grouped.int16_activations = false;
    grouped.split_int8_activations = false;
    CpuTuning fused = grouped;
    fused.grouped_quant = false;
    CpuTuning one_row = grouped;  // the grouped kernels without their multi-row one-token tiles
    one_row.grouped_multi_row = false;
    CpuTuning token_vectors = grouped;  // batches with the tokens along the vector
    token_vectors.batched_min_tokens = 5;
    token_vectors.grouped_max_tokens = 4;
    CpuTuning dot_tiles = grouped;  // batches with the columns along the vector
    dot_tiles.batched_min_tokens = 1000;
    dot_tiles.grouped_max_tokens = 4;
    dot_tiles.plain_tiles_max_tokens = 4;
    for (std::int64_t target : targets) {
        for (const auto& [tuning_name, tuning] :
             {std::pair{"int16", CpuTuning{}}, std::pair{"grouped", grouped},
              std::pair{"grouped one row", one_row}, std::pair{"fused", fused},
              std::pair{"token vectors", token_vectors}, std::pair{"dot tiles", dot_tiles}}) {
            hwy::SetSupportedTargetsForTest(target);
            CpuBackend cpu(BackendOptions{2}, tuning);
            std::vector<Case> cases;
            cases.push_back({"bf16", test::make_plain_weight(DType::kBF16, 9, 101, 1, 1)});
            cases.push_back({"f16", test::make_plain_weight(DType::kF16, 9, 101, 2, 3)});
            for (int bits : {2, 3, 4, 5, 6, 8}) {
                // std::string("q").append(...): GCC 12's -Wrestrict misfires on "q" + std::string.
                cases.push_back({std::string("q").append(std::to_string(bits)),
                                 test::make_quant_weight(bits, 32, DType::kF16, 9, 160, bits, 2)});
            }
            // Groups of 64 and 128: the AVX-512 int16 path's wide layout and its 4-row tiles
            // (9 rows: two tiles and a row left over).
            for (int group : {64, 128}) {
                cases.push_back({std::string("q4 g").append(std::to_string(group)),
                                 test::make_quant_weight(4, group, DType::kF16, 9, 384, group, 1)});
            }
            for (const auto& c : cases) {
                for (std::int64_t n : {1, 3, 6, 13, 20, 31}) {
                    const auto x =
                        test::random_floats(static_cast<std::size_t>(n * c.w.view.cols), 9);
                    std::vector<float> y(static_cast<std::size_t>(n * 9)), expect(y.size());
                    cpu.matmul(c.w.view, x.data(), n, y.data());
                    ref->matmul(c.w.view, x.data(), n, expect.data());
                    expect_close_matmul(
                        c.w, x, n, y, expect,
                        std::string(hwy::TargetName(target)) + " " + tuning_name + " " + c.what,
                        tuning.int16_activations ? Rounding::kInt16 : Rounding::kNone);
                }
            }
        }
    }
    hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace brigade::model::cpu
