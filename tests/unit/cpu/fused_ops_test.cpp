// The CPU backend's fused decoder-layer ops (matmul_many, gated_mlp_up, matmul_add) against
// the plain ops they replace, on the same backend: the floats must be identical, bit for bit,
// for every weight format, odd shapes, decode sizes (1-4 tokens, the grouped kernels), batched
// decode (5-31 tokens, the row-tile kernels) and a prompt-processing size (the fallback), with
// and without int16 activations, for any thread count. Also counts the fork-joins they save.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

// Token counts: decode (grouped / fused kernels), batched decode (row tiles of 2-4 rows), and
// a prompt chunk (>= gemm_min_tokens: dequantized panels, where the fused ops fall back).
const std::int64_t kTokenCounts[] = {1, 2, 3, 4, 5, 9, 40};

struct Format {
    std::string name;
    std::int64_t cols;  // a multiple of the group size when quantized, else odd
    std::function<test::OwnedWeight(std::int64_t rows, std::int64_t cols, std::uint32_t seed)> make;
};

std::vector<Format> formats() {
    auto plain = [](DType dt) {
        return [dt](std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
            return test::make_plain_weight(dt, rows, cols, seed, 1);
        };
    };
    auto quant = [](int bits, int group) {
        return [bits, group](std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
            return test::make_quant_weight(bits, group, DType::kBF16, rows, cols, seed, 1);
        };
    };
    return {{"f32", 37, plain(DType::kF32)},
            {"bf16", 45, plain(DType::kBF16)},
            {"f16", 29, plain(DType::kF16)},
            {"q8 g64", 192, quant(8, 64)},
            {"q4 g64", 192, quant(4, 64)},
            {"q4 g32", 96, quant(4, 32)},
            {"q6 g64 (plain fused kernel)", 128, quant(6, 64)}};
}

// An f32 bias vector of `size` random values, owning its storage.
struct OwnedBias {
    std::vector<float> values;
    WeightVector view;
    explicit OwnedBias(std::int64_t size, std::uint32_t seed)
        : values(test::random_floats(static_cast<std::size_t>(size), seed)) {
        view = WeightVector{DType::kF32, size, values.data()};
    }
};

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", separate ops gave "
                          << want[i];
            return;
        }
    }
}

struct Config {
    int threads;
    bool int16;
    bool int8 = false;  // the opt-in int8 decode kernels go through the fused split as well
    bool split = true;  // split-int8 activations where the CPU has AVX-512 VNNI or AVX-VNNI
    std::string name() const {
        return std::to_string(threads) + " threads" + (int16 ? " int16" : "") +
               (int8 ? " int8" : "") + (split ? "" : " f32");
    }
};
const Config kConfigs[] = {
    {2, false, false, false}, {3, false, false, false}, {2, false}, {3, false}, {2, true},
    {2, false, true},         {3, false, true}};

CpuBackend make_cpu(const Config& c) {
    CpuTuning tuning;
    tuning.int16_activations = c.int16;
    tuning.int8_activations = c.int8;
    tuning.split_int8_activations = c.split;
    return CpuBackend(BackendOptions{c.threads}, tuning);
}

TEST(CpuFusedOps, MatmulManyGivesTheFloatsOfSeparateMatmuls) {
    for (const Config& config : kConfigs) {
        CpuBackend cpu = make_cpu(config);
        for (const Format& f : formats()) {
            // q, k, v of a model with odd head counts: 70, 13 and 13 rows.
            auto wq = f.make(70, f.cols, 11);
            auto wk = f.make(13, f.cols, 12);
            auto wv = f.make(13, f.cols, 13);
            OwnedBias bq(70, 21), bk(13, 22);
            for (std::int64_t n : kTokenCounts) {
                const std::string what = config.name() + " " + f.name + " n=" + std::to_string(n);
                const auto x = test::random_floats(static_cast<std::size_t>(n * f.cols), 5);
                std::vector<float> q(static_cast<std::size_t>(n * 70)), k(n * 13), v(n * 13);
                std::vector<float> q0 = q, k0 = k, v0 = v;
                const MatmulJob jobs[] = {{&wq.view, q.data(), &bq.view},
                                          {&wk.view, k.data(), &bk.view},
                                          {&wv.view, v.data(), nullptr}};
                cpu.matmul_many(jobs, x.data(), n);
                cpu.matmul(wq.view, x.data(), n, q0.data(), &bq.view);
                cpu.matmul(wk.view, x.data(), n, k0.data(), &bk.view);
                cpu.matmul(wv.view, x.data(), n, v0.data(), nullptr);
                expect_same_bits(q, q0, what + " q");
                expect_same_bits(k, k0, what + " k");
                expect_same_bits(v, v0, what + " v");
            }
        }
    }
}

TEST(CpuFusedOps, MatmulManyTakesMixedFormatsAndMoreJobsThanOneRegionHolds) {
    CpuBackend cpu(BackendOptions{2}, CpuTuning{});
    const std::int64_t cols = 192;
    std::vector<test::OwnedWeight> ws;
    ws.push_back(test::make_quant_weight(8, 64, DType::kBF16, 61, cols, 1));
    ws.push_back(test::make_quant_weight(4, 64, DType::kF16, 17, cols, 2));
    ws.push_back(test::make_plain_weight(DType::kBF16, 33, cols, 3));
    ws.push_back(test::make_quant_weight(4, 32, DType::kBF16, 9, cols, 4));
    ws.push_back(test::make_plain_weight(DType::kF32, 5, cols, 5));
    ws.push_back(test::make_quant_weight(8, 64, DType::kBF16, 250, cols, 6));
    for (std::int64_t n : kTokenCounts) {
        const auto x = test::random_floats(static_cast<std::size_t>(n * cols), 9);
        std::vector<std::vector<float>> fused, separate;
        std::vector<MatmulJob> jobs;
        for (const auto& w : ws) {
            fused.emplace_back(static_cast<std::size_t>(n * w.view.rows));
            separate.emplace_back(static_cast<std::size_t>(n * w.view.rows));
        }
        for (std::size_t i = 0; i < ws.size(); ++i) {
            jobs.push_back({&ws[i].view, fused[i].data(), nullptr});
            cpu.matmul(ws[i].view, x.data(), n, separate[i].data());
        }
        cpu.matmul_many(jobs, x.data(), n);
        for (std::size_t i = 0; i < ws.size(); ++i) {
            expect_same_bits(fused[i], separate[i],
                             "n=" + std::to_string(n) + " job " + std::to_string(i));
        }
    }
}

TEST(CpuFusedOps, GatedMlpUpGivesTheFloatsOfMatmulsThenSiluMul) {
    for (const Config& config : kConfigs) {
        CpuBackend cpu = make_cpu(config);
        for (const Format& f : formats()) {
            const std::int64_t rows = 77;  // odd, not a multiple of any vector length
            auto gate = f.make(rows, f.cols, 31);
            auto up = f.make(rows, f.cols, 32);
            OwnedBias b_gate(rows, 33), b_up(rows, 34);
            for (std::int64_t n : kTokenCounts) {
                for (bool with_bias : {false, true}) {
                    const std::string what = config.name() + " " + f.name +
                                             " n=" + std::to_string(n) + (with_bias ? " bias" : "");
                    const WeightVector* bg = with_bias ? &b_gate.view : nullptr;
                    const WeightVector* bu = with_bias ? &b_up.view : nullptr;
                    // Activations up to +-4 so that silu sees both tails.
                    const auto x =
                        test::random_floats(static_cast<std::size_t>(n * f.cols), 7, -4.0f, 4.0f);
                    std::vector<float> out(static_cast<std::size_t>(n * rows));
                    std::vector<float> up_scratch(out.size());
                    cpu.gated_mlp_up(gate.view, bg, up.view, bu, x.data(), n, out.data(),
                                     up_scratch.data());
                    std::vector<float> g0(out.size()), u0(out.size());
                    cpu.matmul(gate.view, x.data(), n, g0.data(), bg);
                    cpu.matmul(up.view, x.data(), n, u0.data(), bu);
                    cpu.silu_mul(g0.data(), u0.data(), n * rows, g0.data());
                    expect_same_bits(out, g0, what);
                }
            }
        }
    }
}

TEST(CpuFusedOps, MatmulAddGivesTheFloatsOfMatmulThenAdd) {
    for (const Config& config : kConfigs) {
        CpuBackend cpu = make_cpu(config);
        for (const Format& f : formats()) {
            const std::int64_t rows = 51;
            auto w = f.make(rows, f.cols, 41);
            OwnedBias bias(rows, 42);
            for (std::int64_t n : kTokenCounts) {
                const std::string what = config.name() + " " + f.name + " n=" + std::to_string(n);
                const auto a = test::random_floats(static_cast<std::size_t>(n * f.cols), 43);
                const auto residual0 = test::random_floats(static_cast<std::size_t>(n * rows), 44);
                std::vector<float> residual = residual0;
                std::vector<float> scratch(residual.size());
                cpu.matmul_add(w.view, a.data(), n, &bias.view, residual.data(), scratch.data());
                std::vector<float> want = residual0, proj(residual.size());
                cpu.matmul(w.view, a.data(), n, proj.data(), &bias.view);
                cpu.add(want.data(), proj.data(), n * rows, want.data());
                expect_same_bits(residual, want, what);
            }
        }
    }
}

// At decode sizes rows are split on multiples of 4 rows, so a row takes the same kernel path
// (the batched kernel's 2- or 4-row tiles, or its single-row tail) whatever the thread count.
// (Prompt processing is not covered: its sgemm panels depend on the thread count.)
TEST(CpuFusedOps, SameFloatsForAnyThreadCountAtDecode) {
    const std::int64_t cols = 192;
    auto wq = test::make_quant_weight(4, 64, DType::kBF16, 70, cols, 51);
    auto wk = test::make_plain_weight(DType::kBF16, 13, cols, 52);
    auto gate = test::make_quant_weight(8, 64, DType::kBF16, 77, cols, 53);
    auto up = test::make_quant_weight(8, 64, DType::kBF16, 77, cols, 54);
    for (std::int64_t n : {1, 2, 3, 4, 5, 9, 31}) {
        const auto x = test::random_floats(static_cast<std::size_t>(n * cols), 55, -3.0f, 3.0f);
        std::vector<float> want_q, want_k, want_mlp;
        // 16: the lent 16-vCPU machines, where most chunks are a single 4-row tile.
        for (int threads : {1, 2, 3, 5, 16}) {
            CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
            std::vector<float> q(static_cast<std::size_t>(n * 70)), k(n * 13), mlp(n * 77),
                scratch(n * 77);
            const MatmulJob jobs[] = {{&wq.view, q.data(), nullptr}, {&wk.view, k.data(), nullptr}};
            cpu.matmul_many(jobs, x.data(), n);
            cpu.gated_mlp_up(gate.view, nullptr, up.view, nullptr, x.data(), n, mlp.data(),
                             scratch.data());
            if (threads == 1) {
                want_q = q;
                want_k = k;
                want_mlp = mlp;
                continue;
            }
            const std::string what =
                "n=" + std::to_string(n) + " " + std::to_string(threads) + " threads";
            expect_same_bits(q, want_q, what + " q");
            expect_same_bits(k, want_k, what + " k");
            expect_same_bits(mlp, want_mlp, what + " gated mlp");
        }
    }
}

// silu_mul takes every element through the vector path wherever a range starts or ends; the
// values still agree with the scalar reference.
TEST(CpuFusedOps, SiluMulAgreesWithTheReferenceAtOddSizes) {
    CpuBackend cpu(BackendOptions{2}, CpuTuning{});
    auto ref = make_backend(BackendKind::kReference).value();
    for (std::int64_t size : {1, 7, 63, 65, 100, 4863, 40000}) {
        const auto gate = test::random_floats(static_cast<std::size_t>(size), 61, -90.0f, 20.0f);
        const auto up = test::random_floats(static_cast<std::size_t>(size), 62);
        std::vector<float> got(gate.size()), want(gate.size());
        cpu.silu_mul(gate.data(), up.data(), size, got.data());
        ref->silu_mul(gate.data(), up.data(), size, want.data());
        for (std::int64_t i = 0; i < size; ++i) {
            const auto k = static_cast<std::size_t>(i);
            ASSERT_NEAR(got[k], want[k], 4e-6f * std::abs(want[k]) + 1e-30f)
                << "size " << size << " element " << i << " gate " << gate[k];
        }
        // Any sub-range gives the same floats as the whole.
        std::vector<float> part(gate.size());
        silu_mul_uniform(gate.data(), up.data(), 0, size / 3, part.data());
        silu_mul_uniform(gate.data(), up.data(), size / 3, size, part.data());
        expect_same_bits(part, got, "size " + std::to_string(size) + " split at a third");
    }
}

// One fork-join per fused op at decode, where the plain ops pay one per matrix.
TEST(CpuFusedOps, OneForkJoinPerFusedOpAtDecode) {
    CpuBackend cpu(BackendOptions{2}, CpuTuning{});
    for (const Format& f : formats()) {
        auto wq = f.make(128, f.cols, 71);
        auto wk = f.make(32, f.cols, 72);
        auto wv = f.make(32, f.cols, 73);
        const auto x = test::random_floats(static_cast<std::size_t>(f.cols), 74);
        std::vector<float> q(128), k(32), v(32), scratch(128);
        const MatmulJob jobs[] = {{&wq.view, q.data(), nullptr},
                                  {&wk.view, k.data(), nullptr},
                                  {&wv.view, v.data(), nullptr}};

        std::uint64_t before = cpu.n_dispatches();
        cpu.matmul_many(jobs, x.data(), 1);
        EXPECT_EQ(cpu.n_dispatches() - before, 1u) << f.name << " matmul_many";
        before = cpu.n_dispatches();
        cpu.Backend::matmul_many(jobs, x.data(), 1);  // the unfused default: one per matrix
        EXPECT_EQ(cpu.n_dispatches() - before, 3u) << f.name << " separate matmuls";

        before = cpu.n_dispatches();
        cpu.gated_mlp_up(wq.view, nullptr, wq.view, nullptr, x.data(), 1, q.data(), scratch.data());
        EXPECT_EQ(cpu.n_dispatches() - before, 1u) << f.name << " gated_mlp_up";
        before = cpu.n_dispatches();
        cpu.matmul_add(wq.view, x.data(), 1, nullptr, q.data(), scratch.data());
        EXPECT_EQ(cpu.n_dispatches() - before, 1u) << f.name << " matmul_add";
    }
}

}  // namespace
}  // namespace brigade::model::cpu
