// The reference backend against values computed independently here (in double, from the
// dense matrices the fixtures build), and against small hand-worked examples.

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "model/backend.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

std::unique_ptr<Backend> reference() { return make_backend(BackendKind::kReference).value(); }

TEST(ReferenceBackend, MatmulMatchesDenseProductForEveryFormat) {
    auto be = reference();
    const std::int64_t rows = 7, cols = 192, n = 3;
    const auto x = test::random_floats(static_cast<std::size_t>(n * cols), 5);
    std::vector<test::OwnedWeight> weights;
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
        weights.push_back(test::make_plain_weight(dt, rows, cols, 3, 1));
    }
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        weights.push_back(test::make_quant_weight(bits, 64, DType::kBF16, rows, cols, bits, 2));
    }
    for (const auto& w : weights) {
        ASSERT_TRUE(be->supports(w.view));
        std::vector<float> y(static_cast<std::size_t>(n * rows));
        be->matmul(w.view, x.data(), n, y.data());
        for (std::int64_t t = 0; t < n; ++t) {
            for (std::int64_t r = 0; r < rows; ++r) {
                double acc = 0.0;
                for (std::int64_t c = 0; c < cols; ++c) {
                    acc += static_cast<double>(x[t * cols + c]) * w.dense[r * cols + c];
                }
                EXPECT_NEAR(y[t * rows + r], acc, 1e-4 * (1.0 + std::abs(acc)))
                    << "bits=" << w.view.bits << " dtype=" << dtype_name(w.view.dtype);
            }
        }
    }
}

TEST(ReferenceBackend, MatmulAddsBias) {
    auto be = reference();
    auto w = test::make_plain_weight(DType::kF32, 2, 3, 9);
    const float bias_values[2] = {10.0f, -20.0f};
    WeightVector bias{DType::kF32, 2, bias_values};
    const float x[3] = {1.0f, 2.0f, 3.0f};
    float y[2];
    be->matmul(w.view, x, 1, y, &bias);
    for (int r = 0; r < 2; ++r) {
        const float expect =
            w.dense[r * 3] + 2 * w.dense[r * 3 + 1] + 3 * w.dense[r * 3 + 2] + bias_values[r];
        EXPECT_NEAR(y[r], expect, 1e-5f);
    }
}

TEST(ReferenceBackend, EmbedDequantizesTheRequestedRows) {
    auto be = reference();
    auto w = test::make_quant_weight(3, 32, DType::kF16, 10, 64, 4, 3);
    const std::int32_t ids[3] = {9, 0, 9};
    std::vector<float> out(3 * 64);
    be->embed(w.view, ids, out.data());
    for (int i = 0; i < 3; ++i) {
        for (int c = 0; c < 64; ++c) EXPECT_EQ(out[i * 64 + c], w.dense[ids[i] * 64 + c]);
    }
}

TEST(ReferenceBackend, RmsNormHandExample) {
    auto be = reference();
    const float x[4] = {1.0f, -2.0f, 3.0f, -4.0f};  // mean square 7.5
    const float wv[4] = {1.0f, 2.0f, 0.5f, 1.0f};
    WeightVector w{DType::kF32, 4, wv};
    float y[4];
    be->rms_norm(x, w, 1, 4, 0.5f, y);
    const double inv = 1.0 / std::sqrt(8.0);
    EXPECT_NEAR(y[0], 1.0 * inv, 1e-6);
    EXPECT_NEAR(y[1], -4.0 * inv, 1e-6);
    EXPECT_NEAR(y[2], 1.5 * inv, 1e-6);
    EXPECT_NEAR(y[3], -4.0 * inv, 1e-6);
}

TEST(ReferenceBackend, RopeRotatesHalfSplitPairsAndPassesTheRestThrough) {
    auto be = reference();
    // head_dim 6, rot_dims 4 (n_freq 2): pairs (0,2) and (1,3); dims 4,5 pass through.
    float x[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    const std::int32_t pos[1] = {3};
    const float inv_freq[2] = {0.5f, 0.25f};
    be->rope(x, 1, 1, 6, pos, inv_freq, 2.0f);
    const double t0 = 1.5, t1 = 0.75;
    EXPECT_NEAR(x[0], 2 * (1 * std::cos(t0) - 3 * std::sin(t0)), 1e-5);
    EXPECT_NEAR(x[2], 2 * (3 * std::cos(t0) + 1 * std::sin(t0)), 1e-5);
    EXPECT_NEAR(x[1], 2 * (2 * std::cos(t1) - 4 * std::sin(t1)), 1e-5);
    EXPECT_NEAR(x[3], 2 * (4 * std::cos(t1) + 2 * std::sin(t1)), 1e-5);
    EXPECT_EQ(x[4], 5.0f);
    EXPECT_EQ(x[5], 6.0f);
}

TEST(ReferenceBackend, AttentionIsCausalFromQPos0WithGqa) {
    auto be = reference();
    // 2 query heads sharing 1 KV head, head_dim 2, 3 cached keys, 1 query at position 1:
    // it sees keys 0 and 1 only.
    const float k[6] = {1, 0, 0, 1, 100, 100};
    const float v[6] = {1, 2, 3, 4, 1000, 1000};
    const float q[4] = {1, 0, 0, 2};
    float out[4];
    AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = out;
    a.n_q = 1;
    a.n_kv = 3;
    a.n_heads = 2;
    a.n_kv_heads = 1;
    a.head_dim = 2;
    a.q_pos0 = 1;
    a.scale = 1.0f;
    be->attention(a);
    // head 0: scores (1, 0) -> p = (e/(e+1), 1/(e+1))
    const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
    EXPECT_NEAR(out[0], p0 * 1 + (1 - p0) * 3, 1e-5);
    EXPECT_NEAR(out[1], p0 * 2 + (1 - p0) * 4, 1e-5);
    // head 1: scores (0, 2)
    const double p1 = 1.0 / (1.0 + std::exp(2.0));
    EXPECT_NEAR(out[2], p1 * 1 + (1 - p1) * 3, 1e-5);
    EXPECT_NEAR(out[3], p1 * 2 + (1 - p1) * 4, 1e-5);
}

TEST(ReferenceBackend, SiluMulAndAddAlias) {
    auto be = reference();
    float g[3] = {0.0f, 1.0f, -2.0f};
    const float u[3] = {5.0f, 2.0f, 3.0f};
    be->silu_mul(g, u, 3, g);
    EXPECT_NEAR(g[0], 0.0, 1e-7);
    EXPECT_NEAR(g[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
    EXPECT_NEAR(g[2], 3.0 * -2.0 / (1.0 + std::exp(2.0)), 1e-6);
    float a[2] = {1.0f, 2.0f};
    const float b[2] = {0.5f, -4.0f};
    be->add(a, b, 2, a);
    EXPECT_EQ(a[0], 1.5f);
    EXPECT_EQ(a[1], -2.0f);
}

TEST(ReferenceBackend, AllocIsZeroedAndReadWriteRoundTrips) {
    auto be = reference();
    DeviceBuffer buf = be->alloc(100);
    ASSERT_NE(buf.data(), nullptr);
    EXPECT_EQ(buf.bytes(), 100u);
    for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(static_cast<std::uint8_t*>(buf.data())[i], 0);
    const float src[2] = {1.5f, -3.0f};
    be->write(buf, 8, src, sizeof src);
    float dst[2] = {};
    be->read(buf, 8, dst, sizeof dst);
    EXPECT_EQ(dst[0], 1.5f);
    EXPECT_EQ(dst[1], -3.0f);
}

TEST(MakeBackend, RejectsNegativeThreadsAndCuda) {
    EXPECT_FALSE(make_backend(BackendKind::kCpu, BackendOptions{-1}).has_value());
    EXPECT_FALSE(make_backend(BackendKind::kCuda).has_value());
}

}  // namespace
}  // namespace brigade::model::cpu
