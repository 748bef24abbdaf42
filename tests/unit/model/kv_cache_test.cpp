#include "model/kv_cache.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/backend.hpp"
#include "model/cpu/weight_decode.hpp"

namespace brigade::model {
namespace {

// The K and V blocks of an F32 cache, as floats.
float* keys(KvCache& kv, std::uint64_t seq, int layer) {
    return static_cast<float*>(kv.keys(seq, layer));
}
float* values(KvCache& kv, std::uint64_t seq, int layer) {
    return static_cast<float*>(kv.values(seq, layer));
}

// Writes position p of layer l of K as (seq*1000 + l*100 + p), V as its negative.
void fill(KvCache& kv, std::uint64_t seq, int n_layers, int kv_dim, std::int64_t from,
          std::int64_t to) {
    for (int l = 0; l < n_layers; ++l) {
        for (std::int64_t p = from; p < to; ++p) {
            for (int d = 0; d < kv_dim; ++d) {
                const float v = static_cast<float>(seq * 1000 + l * 100 + p);
                keys(kv, seq, l)[p * kv_dim + d] = v;
                values(kv, seq, l)[p * kv_dim + d] = -v;
            }
        }
    }
    kv.set_length(seq, to);
}

TEST(KvCache, GrowTruncateCopyPrefixRelease) {
    auto backend = make_backend(BackendKind::kReference).value();
    KvCache kv(*backend, 2, 4, {1000, 0}, DType::kF32);
    EXPECT_EQ(kv.length(1), 0);
    ASSERT_TRUE(kv.reserve(1, 10));
    fill(kv, 1, 2, 4, 0, 10);
    EXPECT_EQ(kv.length(1), 10);
    EXPECT_EQ(kv.bytes_per_position(), 2u * 2 * 4 * 4);
    EXPECT_EQ(kv.bytes_used(), 10 * kv.bytes_per_position());
    // Growing past the first allocation keeps what was there.
    ASSERT_TRUE(kv.reserve(1, 600));
    EXPECT_GE(kv.bytes_reserved(), 600 * kv.bytes_per_position());
    EXPECT_EQ(keys(kv, 1, 1)[9 * 4], 1109.0f);
    EXPECT_EQ(values(kv, 1, 0)[3 * 4 + 2], -1003.0f);

    ASSERT_TRUE(kv.copy_prefix(1, 2, 6));
    EXPECT_EQ(kv.length(2), 6);
    EXPECT_EQ(keys(kv, 2, 1)[5 * 4], 1105.0f);
    // The copy is independent of the source.
    keys(kv, 2, 0)[0] = 7.0f;
    EXPECT_EQ(keys(kv, 1, 0)[0], 1000.0f);

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
    KvCache kv(*backend, 2, 4, {1000, 0}, DType::kF32);
    ASSERT_TRUE(kv.reserve(1, 10));
    fill(kv, 1, 2, 4, 0, 10);
    const void* k_block = kv.keys(1, 1);
    ASSERT_TRUE(kv.reserve(5, 3));  // an older entry under the new id is replaced
    EXPECT_EQ(kv.positions_claimed(), 10 + 3);
    ASSERT_TRUE(kv.rename(1, 5, 7));
    EXPECT_EQ(kv.positions_claimed(), 7);
    EXPECT_FALSE(kv.contains(1));
    EXPECT_EQ(kv.length(5), 7);
    EXPECT_EQ(kv.keys(5, 1), k_block) << "renamed, not copied";
    EXPECT_EQ(keys(kv, 5, 1)[6 * 4], 1106.0f);
    EXPECT_EQ(kv.n_sequences(), 1u);
    EXPECT_FALSE(kv.rename(5, 6, 8)) << "more positions than it has";
    EXPECT_FALSE(kv.rename(9, 6, 0)) << "unknown sequence";
    EXPECT_EQ(kv.length(5), 7);
    EXPECT_FALSE(kv.contains(6));
}

TEST(KvCache, LimitsGiveClearErrors) {
    auto backend = make_backend(BackendKind::kReference).value();
    KvCache kv(*backend, 1, 8, {100, 0}, DType::kF32);
    auto r = kv.reserve(1, 101);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::out_of_range);
    EXPECT_NE(r.error().message.find("context limit"), std::string::npos);

    const std::uint64_t per_pos = 2 * 8 * 4;
    KvCache budget(*backend, 1, 8, {100000, 300 * per_pos}, DType::kF32);
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
    KvCache kv(*backend, 1, 8, {100000, 300 * per_pos}, DType::kF32);
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
    EXPECT_EQ(keys(kv, 1, 0)[99 * 8], 1099.0f);
    EXPECT_EQ(values(kv, 2, 0)[9 * 8], -2009.0f);
    kv.set_max_bytes(0);  // no budget: any claim
    EXPECT_EQ(kv.budget_positions(), -1);
    ASSERT_TRUE(kv.reserve(3, 1000));
}

// An F16 cache (the default) holds half the bytes; rows are stored through the backend rounded
// to nearest even, with magnitudes past the largest half saturated, and survive growth and
// prefix copies bit for bit. Keys are tiled (element e of position p where key_element_index
// puts it), values are rows. Both backends store the same bits.
TEST(KvCache, F16RowsAreRoundedSaturatedAndKeptThroughGrowth) {
    for (const BackendKind kind : {BackendKind::kReference, BackendKind::kCpu}) {
        auto backend = make_backend(kind).value();
        const int kv_dim = 37;  // not a multiple of any vector length: the scalar tail too
        KvCache kv(*backend, 2, kv_dim, {4096, 0});
        EXPECT_EQ(kv.dtype(), DType::kF16);
        EXPECT_EQ(kv.key_layout(), KeyLayout::kTiles);
        EXPECT_EQ(kv.bytes_per_position(), 2u * 2 * kv_dim * 2);
        const std::int64_t n = 300;  // past the first allocation of 256 positions
        DeviceBuffer rows = backend->alloc(static_cast<std::size_t>(n * kv_dim) * sizeof(float));
        float* x = rows.f32();
        for (std::int64_t i = 0; i < n * kv_dim; ++i) {
            x[i] = std::sin(0.37f * static_cast<float>(i)) * std::ldexp(1.0f, (i % 40) - 20);
        }
        x[5] = 1.0e6f;           // saturates to 65504
        x[6] = -70000.0f;        // to -65504
        x[7] = 65519.0f;         // rounds to 65504 (not inf)
        x[8] = 1.0f + 0x1p-11f;  // a tie: to even (1.0)
        x[9] = 3.0e-8f;          // a subnormal half
        ASSERT_TRUE(kv.reserve(1, 200));
        kv.write_rows(1, 1, 0, 0, 200, rows, 0);
        kv.set_length(1, 200);
        ASSERT_TRUE(kv.reserve(1, n));  // grows: the 200 valid positions are copied
        kv.write_rows(1, 1, 0, 200, n - 200, rows, 200 * kv_dim * sizeof(float));
        kv.write_rows(1, 0, 1, 0, n, rows, 0);
        kv.set_length(1, n);
        ASSERT_TRUE(kv.copy_prefix(1, 2, n));
        for (std::uint64_t seq : {1u, 2u}) {
            const auto* k = static_cast<const std::uint16_t*>(kv.keys(seq, 1));
            const auto* v = static_cast<const std::uint16_t*>(kv.values(seq, 0));
            auto key = [&](std::int64_t i) {
                return k[key_element_index(KeyLayout::kTiles, i / kv_dim, i % kv_dim, kv_dim)];
            };
            for (std::int64_t i = 0; i < n * kv_dim; ++i) {
                const std::uint16_t want = cpu::f32_to_f16_saturated(x[i]);
                ASSERT_EQ(key(i), want)
                    << "kind " << static_cast<int>(kind) << " seq " << seq << " element " << i;
                ASSERT_EQ(v[i], want) << "element " << i;
            }
            EXPECT_EQ(key(5), 0x7BFF);
            EXPECT_EQ(key(6), 0xFBFF);
            EXPECT_EQ(key(7), 0x7BFF);
            EXPECT_EQ(key(8), 0x3C00);
            EXPECT_EQ(cpu::f16_to_f32(key(9)), std::ldexp(1.0f, -24));  // the smallest subnormal
        }
    }
}

}  // namespace
}  // namespace brigade::model
