#include "model/kv_cache.hpp"

#include <gtest/gtest.h>

#include "model/backend.hpp"

namespace brigade::model {
namespace {

// Writes position p of layer l of K as (seq*1000 + l*100 + p), V as its negative.
void fill(KvCache& kv, std::uint64_t seq, int n_layers, int kv_dim, std::int64_t from,
          std::int64_t to) {
    for (int l = 0; l < n_layers; ++l) {
        for (std::int64_t p = from; p < to; ++p) {
            for (int d = 0; d < kv_dim; ++d) {
                const float v = static_cast<float>(seq * 1000 + l * 100 + p);
                kv.keys(seq, l)[p * kv_dim + d] = v;
                kv.values(seq, l)[p * kv_dim + d] = -v;
            }
        }
    }
    kv.set_length(seq, to);
}

TEST(KvCache, GrowTruncateCopyPrefixRelease) {
    auto backend = make_backend(BackendKind::kReference).value();
    KvCache kv(*backend, 2, 4, {1000, 0});
    EXPECT_EQ(kv.length(1), 0);
    ASSERT_TRUE(kv.reserve(1, 10));
    fill(kv, 1, 2, 4, 0, 10);
    EXPECT_EQ(kv.length(1), 10);
    EXPECT_EQ(kv.bytes_per_position(), 2u * 2 * 4 * 4);
    EXPECT_EQ(kv.bytes_used(), 10 * kv.bytes_per_position());
    // Growing past the first allocation keeps what was there.
    ASSERT_TRUE(kv.reserve(1, 600));
    EXPECT_GE(kv.bytes_reserved(), 600 * kv.bytes_per_position());
    EXPECT_EQ(kv.keys(1, 1)[9 * 4], 1109.0f);
    EXPECT_EQ(kv.values(1, 0)[3 * 4 + 2], -1003.0f);

    ASSERT_TRUE(kv.copy_prefix(1, 2, 6));
    EXPECT_EQ(kv.length(2), 6);
    EXPECT_EQ(kv.keys(2, 1)[5 * 4], 1105.0f);
    // The copy is independent of the source.
    kv.keys(2, 0)[0] = 7.0f;
    EXPECT_EQ(kv.keys(1, 0)[0], 1000.0f);

    ASSERT_TRUE(kv.truncate(1, 4));
    EXPECT_EQ(kv.length(1), 4);
    EXPECT_FALSE(kv.truncate(1, 5));
    EXPECT_FALSE(kv.copy_prefix(1, 3, 5));
    kv.release(2);
    EXPECT_FALSE(kv.contains(2));
    EXPECT_EQ(kv.n_sequences(), 1u);
}

TEST(KvCache, RenameKeepsThePrefixWithoutACopy) {
    auto backend = make_backend(BackendKind::kReference).value();
    KvCache kv(*backend, 2, 4, {1000, 0});
    ASSERT_TRUE(kv.reserve(1, 10));
    fill(kv, 1, 2, 4, 0, 10);
    const float* keys = kv.keys(1, 1);
    ASSERT_TRUE(kv.reserve(5, 3));  // an older entry under the new id is replaced
    ASSERT_TRUE(kv.rename(1, 5, 7));
    EXPECT_FALSE(kv.contains(1));
    EXPECT_EQ(kv.length(5), 7);
    EXPECT_EQ(kv.keys(5, 1), keys) << "renamed, not copied";
    EXPECT_EQ(kv.keys(5, 1)[6 * 4], 1106.0f);
    EXPECT_EQ(kv.n_sequences(), 1u);
    EXPECT_FALSE(kv.rename(5, 6, 8)) << "more positions than it has";
    EXPECT_FALSE(kv.rename(9, 6, 0)) << "unknown sequence";
    EXPECT_EQ(kv.length(5), 7);
    EXPECT_FALSE(kv.contains(6));
}

TEST(KvCache, LimitsGiveClearErrors) {
    auto backend = make_backend(BackendKind::kReference).value();
    KvCache kv(*backend, 1, 8, {100, 0});
    auto r = kv.reserve(1, 101);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::out_of_range);
    EXPECT_NE(r.error().message.find("context limit"), std::string::npos);

    const std::uint64_t per_pos = 2 * 8 * 4;
    KvCache budget(*backend, 1, 8, {100000, 300 * per_pos});
    ASSERT_TRUE(budget.reserve(1, 200));  // 256 positions reserved
    auto over = budget.reserve(2, 10);
    ASSERT_FALSE(over);
    EXPECT_NE(over.error().message.find("budget"), std::string::npos);
    EXPECT_FALSE(budget.contains(2));
    budget.release(1);
    EXPECT_TRUE(budget.reserve(2, 10));
}

}  // namespace
}  // namespace brigade::model
