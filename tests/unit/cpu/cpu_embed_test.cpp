// CpuBackend::embed against the reference backend: plain and quantized tables, repeated and
// boundary ids, and ids out of range (zeros, no crash).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/cpu/cpu_backend.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

TEST(CpuEmbed, MatchesReferenceIncludingQuantizedTables) {
    auto ref = make_backend(BackendKind::kReference).value();
    CpuBackend cpu(BackendOptions{3}, CpuTuning{});
    struct Table {
        std::string what;
        test::OwnedWeight w;
    };
    std::vector<Table> tables;
    tables.push_back({"bf16", test::make_plain_weight(DType::kBF16, 50, 35, 1, 1)});
    tables.push_back({"q4", test::make_quant_weight(4, 64, DType::kBF16, 50, 128, 2, 3)});
    tables.push_back({"q6", test::make_quant_weight(6, 32, DType::kF32, 50, 96, 3, 2)});
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back((i * 17) % 50);
    ids.push_back(49);
    ids.push_back(0);
    for (const auto& t : tables) {
        const auto cols = static_cast<std::size_t>(t.w.view.cols);
        std::vector<float> out(ids.size() * cols), expect(out.size());
        cpu.embed(t.w.view, ids, out.data());
        ref->embed(t.w.view, ids, expect.data());
        for (std::size_t i = 0; i < out.size(); ++i) {
            // Decoding is exact up to the fused multiply-add of scale*q + bias.
            ASSERT_NEAR(out[i], expect[i], 1e-6 * (1.0 + std::abs(expect[i])))
                << t.what << " " << i;
        }
    }
}

TEST(CpuEmbed, OutOfRangeIdsGiveZerosNotACrash) {
    CpuBackend cpu(BackendOptions{1}, CpuTuning{});
    auto t = test::make_plain_weight(DType::kF32, 4, 8, 1);
    const std::int32_t ids[2] = {4, -1};
    std::vector<float> out(16, 1.0f);
    cpu.embed(t.view, ids, out.data());
    for (float v : out) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace brigade::model::cpu
