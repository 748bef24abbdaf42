// The AMX tiles (matmul_amx.cpp, matmul_amx_bf16.cpp) against the reference backend and against
// the one-token kernels, where this CPU and kernel offer them (each test skips otherwise): every
// format and batch size, both digit plans, row splits, extreme activations. The tolerance is
// matmul_checks.hpp's.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "tests/unit/cpu/matmul_checks.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

using namespace matmul_checks;

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
                             {2, 3, 4, 5, 8, 9, 16, 17, 31, 33, 70},
                             decode_steps ? Rounding::kSplitInt8 : Rounding::kAmx);
        }
    }
}

// Rows of 4-bit, 8-bit and BF16 matrices (wide ones with more than one 16-row tile per thread,
// and a small model's: one and three groups, a partial chunk) give the same bits on 1, 3 and 7
// threads, and each token of a batch (3, 4 and 7 tokens: one narrow block of two digits, paired
// for 3 and 4 where the groups are 32 or 64 and even in number, or one and two of four; 19: two
// wide ones) is within f32 rounding of what the one-token split-int8 kernel
// gives it alone, plus the rounding of the less precise side. A batch of decode steps has the
// GEMV's two digits, the same ones for the same x, so its tokens differ from alone by f32
// rounding only.
void expect_amx_rows_split_and_alone(bool decode_steps) {
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.amx_min_tokens = 3;       // 3 decode steps take AVX-512's split-int8 pass by default
    tuning.amx_8bit_min_tokens = 3;  // and 8-bit ones up to 4
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
                for (const std::int64_t n : {3, 4, 7, 19}) {
                    if (bits == 16 && n < 12) continue;  // BF16 takes the tiles from 12 tokens
                    const auto x = test::random_floats(static_cast<std::size_t>(n * cols), 9);
                    // 1, 3 and 7 threads (7: the activations prepared on the pool, so that the
                    // two groups of a pair may be prepared by two threads into the same tiles),
                    // then 3 with each row's codes prefetched ahead instead of the next row
                    // block's (a prefetch changes no float), then 3 with 4-bit pairs split by
                    // group rather than by nibble (the same integer sums).
                    std::vector<std::vector<float>> ys;
                    for (int run = 0; run < 5; ++run) {
                        CpuTuning run_tuning = tuning;
                        run_tuning.amx_prefetch_next_block = run != 3;
                        run_tuning.amx_pair_nibbles = run != 4;
                        if (run == 2) run_tuning.amx_prepare_serial_below = 0;
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
                    EXPECT_EQ(std::memcmp(ys[0].data(), ys[4].data(), ys[0].size() * sizeof(float)),
                              0)
                        << what << " (4-bit pairs split by group)";
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
// leaves the others within tolerance. Prompt rows (four digits) and decode steps (two: 3 tokens
// of 4 groups are a paired narrow block, whose other columns must stay out of these tokens).
TEST(CpuMatmul, AmxHandlesZeroAndExtremeTokens) {
    if (!amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-INT8 tiles";
    auto ref = reference();
    CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.amx_min_tokens = 2;
    auto w = test::make_quant_weight(4, 64, DType::kBF16, 21, 256, 5, 1);
    std::vector<float> x(3 * 256, 0.0f);                                          // token 0: zero
    for (int c = 0; c < 256; ++c) x[256 + c] = c % 64 == 9 ? -1e30f : 1e-30f;     // token 1
    for (int c = 0; c < 256; ++c) x[512 + c] = static_cast<float>(c % 7) - 3.0f;  // token 2
    std::vector<float> expect(3 * 21);
    ref->matmul(w.view, x.data(), 3, expect.data());
    for (const bool decode_steps : {false, true}) {
        CpuBackend cpu(BackendOptions{2}, tuning);
        cpu.set_rows_are_decode_steps(decode_steps);
        std::vector<float> y(3 * 21, NAN);
        cpu.matmul(w.view, x.data(), 3, y.data());
        const char* what = decode_steps ? "decode steps" : "prompt rows";
        for (int r = 0; r < 21; ++r) EXPECT_EQ(y[r], 0.0f) << what << " r=" << r;
        for (int r = 21; r < 63; ++r) {
            // Two digits round token 2's small integers (four hold them within f32 rounding).
            const double rounding =
                decode_steps ? rounding_bound(w, x, r / 21, r % 21, Rounding::kSplitInt8) : 0.0;
            EXPECT_NEAR(y[r], expect[r], 1e-5 * std::abs(expect[r]) + 1e-6 + rounding)
                << what << " r=" << r;
            EXPECT_NE(expect[r], 0.0f) << r;
        }
    }
}

// Which narrow blocks pair two groups into one C tile (amx_pairs_groups): 3-4 decode steps (two
// digits, half a block's columns) on groups of 32 or 64, an even count of them per row.
TEST(CpuMatmul, AmxPairsGroupsOnlyWhereTheirTokensFillHalfABlock) {
    auto q4 = [](int group, std::int64_t cols) {
        return test::make_quant_weight(4, group, DType::kBF16, 16, cols, 3, 0);
    };
    const auto g64 = q4(64, 896), g32 = q4(32, 896), g128 = q4(128, 1024), odd = q4(64, 192);
    EXPECT_TRUE(amx_pairs_groups(g64.view, 3, 2, true));
    EXPECT_TRUE(amx_pairs_groups(g64.view, 4, 2, true));
    EXPECT_TRUE(amx_pairs_groups(g32.view, 4, 2, true));
    EXPECT_FALSE(amx_pairs_groups(g64.view, 4, 2, false));  // CpuTuning::amx_pair_groups off
    EXPECT_FALSE(amx_pairs_groups(g64.view, 5, 2, true));   // 10 of 16 columns
    EXPECT_FALSE(amx_pairs_groups(g64.view, 3, 4, true));   // prompt rows: four digits
    EXPECT_FALSE(amx_pairs_groups(g128.view, 4, 2, true));  // two K steps per group
    EXPECT_FALSE(amx_pairs_groups(odd.view, 4, 2, true));   // 3 groups
}

}  // namespace
}  // namespace brigade::model::cpu
