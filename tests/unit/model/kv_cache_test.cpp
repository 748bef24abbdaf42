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

    EXPECT_EQ(kv.positions_claimed(), 600 + 6);
    ASSERT_TRUE(kv.truncate(1, 4));
    EXPECT_EQ(kv.length(1), 4);
    EXPECT_FALSE(kv.truncate(1, 5));
    EXPECT_FALSE(kv.copy_prefix(1, 3, 5));
    EXPECT_EQ(kv.positions_claimed(), 4 + 6);
    kv.release(2);
    kv.release(2);  // unknown by now: nothing changes
    EXPECT_FALSE(kv.contains(2));
    EXPECT_EQ(kv.n_sequences(), 1u);
    EXPECT_EQ(kv.positions_claimed(), 4);
}

TEST(KvCache, RenameKeepsThePrefixWithoutACopy) {
    auto backend = make_backend(BackendKind::kReference).value();
    KvCache kv(*backend, 2, 4, {1000, 0});
    ASSERT_TRUE(kv.reserve(1, 10));
    fill(kv, 1, 2, 4, 0, 10);
    const float* keys = kv.keys(1, 1);
    ASSERT_TRUE(kv.reserve(5, 3));  // an older entry under the new id is replaced
    EXPECT_EQ(kv.positions_claimed(), 10 + 3);
    ASSERT_TRUE(kv.rename(1, 5, 7));
    EXPECT_EQ(kv.positions_claimed(), 7);
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
    ASSERT_TRUE(budget.reserve(1, 200));  // 200 positions claimed
    auto over = budget.reserve(2, 101);   // 200 + 101 > 300
    ASSERT_FALSE(over);
    EXPECT_NE(over.error().message.find("budget"), std::string::npos);
    EXPECT_FALSE(budget.contains(2));
    EXPECT_TRUE(budget.fits_budget_alone(300));
    EXPECT_FALSE(budget.fits_budget_alone(301));
    budget.release(1);
    EXPECT_TRUE(budget.reserve(2, 10));
}

// The budget counts the positions sequences claim, not their allocations: near it a sequence
// grows only into the room the others leave, and a truncated sequence gives its room back.
TEST(KvCache, BudgetCountsClaimedPositionsAndGrowthStaysWithinIt) {
    auto backend = make_backend(BackendKind::kReference).value();
    const std::uint64_t per_pos = 2 * 8 * 4;
    KvCache kv(*backend, 1, 8, {100000, 300 * per_pos});
    EXPECT_EQ(kv.budget_positions(), 300);
    ASSERT_TRUE(kv.reserve(1, 200));  // a first allocation of 256, 200 claimed
    ASSERT_TRUE(kv.reserve(2, 10));   // 256 would pass the room sequence 1 leaves: 100
    EXPECT_EQ(kv.positions_claimed(), 210);
    EXPECT_EQ(kv.bytes_reserved(), (256 + 100) * per_pos);
    fill(kv, 2, 1, 8, 0, 10);
    ASSERT_TRUE(kv.reserve(1, 280));  // doubling to 512 capped at 300 - 10
    EXPECT_EQ(kv.bytes_reserved(), (290 + 100) * per_pos);
    fill(kv, 1, 1, 8, 0, 280);
    EXPECT_FALSE(kv.reserve(2, 21));  // 280 + 21 > 300
    EXPECT_EQ(kv.positions_claimed(), 290);
    ASSERT_TRUE(kv.truncate(1, 100));  // gives 180 positions back
    ASSERT_TRUE(kv.reserve(2, 21));
    EXPECT_EQ(kv.positions_claimed(), 121);
    // The data survived every growth.
    EXPECT_EQ(kv.keys(1, 0)[99 * 8], 1099.0f);
    EXPECT_EQ(kv.values(2, 0)[9 * 8], -2009.0f);
    kv.set_max_bytes(0);  // no budget: any claim
    EXPECT_EQ(kv.budget_positions(), -1);
    ASSERT_TRUE(kv.reserve(3, 1000));
}

}  // namespace
}  // namespace brigade::model
