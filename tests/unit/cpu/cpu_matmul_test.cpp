// CpuBackend::matmul against the reference backend on odd shapes, every weight format, unaligned
// data, 1-3 threads, both the fused decode kernels and the panel GEMM path (with and without
// BLAS), and every Highway target this machine can run. The tolerance is matmul_checks.hpp's;
// the AMX tiles' tests are in cpu_matmul_amx_test.cpp.

#include <gtest/gtest.h>
// clang-format off
// First, so that HWY_TARGETS here is the kernels' set of targets.
#include "model/cpu/simd_targets.hpp"
#include <hwy/targets.h>
// clang-format on

#include <cmath>
#include <cstring>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "tests/unit/cpu/matmul_checks.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

using namespace matmul_checks;

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

// Split-int8 activations, each instruction set this CPU runs (AVX-512 VNNI, AVX-VNNI, AVX2): every
// format the kernel takes (4-bit, one and two tokens), partial chunks (rows of 96, 160 and 352
// columns), 1-3 threads; the other formats and n > 2 take the f32 kernels or AMX tiles.
TEST(CpuMatmul, DecodeKernelsSplitInt8AllFormatsAndThreadCounts) {
    if (split_int8_variants_available().empty())
        GTEST_SKIP() << "this CPU has no split-int8 kernel (AVX2 or Arm dot products)";
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        const CpuTuning tuning = split_int8_tuning(variant);
        for (int threads : {1, 2, 3}) {
            CpuBackend cpu(BackendOptions{threads}, tuning);
            run_matmul_cases(cpu,
                             std::string("split-int8 ") + split_int8_variant_name(variant) +
                                 " threads=" + std::to_string(threads),
                             {1, 2, 3, 4, 5, 9}, Rounding::kSplitInt8);
            // Decode steps: batches on 4-bit weights take the kernel too (AVX-512, two tokens
            // a pass, without AMX).
            CpuTuning no_amx = tuning;
            no_amx.amx = false;
            CpuBackend steps(BackendOptions{threads}, no_amx);
            steps.set_rows_are_decode_steps(true);
            run_matmul_cases(steps,
                             std::string("split-int8 decode steps ") +
                                 split_int8_variant_name(variant) +
                                 " threads=" + std::to_string(threads),
                             {3, 4, 5, 16}, Rounding::kSplitInt8);
        }
    }
}

// Two tokens on 4-bit weights (and 8-bit ones with AVX-512) go through the split-int8 kernel
// (CpuTuning::split_int8_max_tokens; AVX-512 takes both in one pass over the codes, the others
// one token after the other): each gets the bits it gets alone, on any thread count, for every
// group size and kernel variant.
TEST(CpuMatmul, SplitInt8TwoTokensGiveEachTheBitsOfOneAlone) {
    if (split_int8_variants_available().empty())
        GTEST_SKIP() << "this CPU has no split-int8 kernel (AVX2 or Arm dot products)";
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

// A batch of decode steps on 4- and 8-bit weights without AMX takes the split-int8 kernel four
// tokens a pass (a last three in one), then two, then one: AVX-512's up to 31 tokens, the
// 256-bit and Arm ones up to 16, 8-bit rows where the kernel takes them
// (AVX-512, AVX-VNNI) (CpuTuning::split_int8_decode_max_tokens*, split_int8_four,
// split_int8_decode_8bit): each token gets the bits it gets alone, for 3, 4, 5, 16 and 31 tokens,
// every group size, 1 and 3 threads. Prompt rows of the same batch sizes keep the f32 kernels.
TEST(CpuMatmul, SplitInt8DecodeStepsGiveEachTokenTheBitsOfOneAlone) {
    if (split_int8_variants_available().empty())
        GTEST_SKIP() << "no split-int8 kernel: batches keep the f32 kernels";
    for (SplitInt8Variant variant : split_int8_variants_available()) {
        CpuTuning tuning = split_int8_tuning(variant);
        tuning.amx = false;
        const std::int64_t limit =
            variant == SplitInt8Variant::kAvx512Vnni ? tuning.split_int8_decode_max_tokens
            : variant == SplitInt8Variant::kNeonDot  ? tuning.split_int8_decode_max_tokens_neon
                                                     : tuning.split_int8_decode_max_tokens_256;
        for (int bits : {4, 8}) {
            for (int group : {32, 64, 128}) {
                auto w = test::make_quant_weight(bits, group, DType::kBF16, 75, 896,
                                                 70 + group + bits, 0);
                if (!split_int8_kernel_supports(w.view, variant)) continue;
                for (const std::int64_t n : {3, 4, 5, 16, 31}) {
                    if (n > limit) continue;
                    const auto x = test::random_floats(static_cast<std::size_t>(n * 896), 13);
                    for (int threads : {1, 3}) {
                        CpuBackend cpu(BackendOptions{threads}, tuning);
                        cpu.set_rows_are_decode_steps(true);
                        std::vector<float> batch(static_cast<std::size_t>(n * 75), NAN);
                        cpu.matmul(w.view, x.data(), n, batch.data());
                        const std::string what = std::string(split_int8_variant_name(variant)) +
                                                 " q" + std::to_string(bits) + " g" +
                                                 std::to_string(group) + " n=" + std::to_string(n) +
                                                 " threads=" + std::to_string(threads);
                        for (std::int64_t t = 0; t < n; ++t) {
                            std::vector<float> alone(75, NAN);
                            cpu.matmul(w.view, x.data() + t * 896, 1, alone.data());
                            EXPECT_EQ(std::memcmp(batch.data() + t * 75, alone.data(),
                                                  75 * sizeof(float)),
                                      0)
                                << what << " t=" << t;
                        }
                        // The same batch as prompt rows: f32 activations, not the digits.
                        cpu.set_rows_are_decode_steps(false);
                        std::vector<float> prompt(batch.size(), NAN);
                        cpu.matmul(w.view, x.data(), n, prompt.data());
                        EXPECT_NE(
                            std::memcmp(batch.data(), prompt.data(), batch.size() * sizeof(float)),
                            0)
                            << what;
                    }
                }
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
