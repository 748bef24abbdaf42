// CpuBackend's non-matmul ops against the reference backend: RMSNorm, RoPE, attention (GQA,
// decode against a cache, split-K over long contexts), SiLU-mul and add, with 1-3 threads.
//
// Tolerances: element-wise ops differ from the reference only by the vector exp (hwy Exp,
// about 2 ulp), so 1e-6 relative; RMSNorm by the order of the sum of squares, so 1e-5
// relative; attention by summation order and the online-softmax rescaling, so
// 2e-5 + 1e-5*|ref| with inputs in [-1, 1].

#include <gtest/gtest.h>
// clang-format off
// First, so that HWY_TARGETS here is the kernels' set of targets.
#include "model/cpu/simd_targets.hpp"
#include <hwy/targets.h>
// clang-format on

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/weight_decode.hpp"
#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

std::unique_ptr<Backend> reference() { return make_backend(BackendKind::kReference).value(); }

void expect_all_near(const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
                     double rel_tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    int failures = 0;
    for (std::size_t i = 0; i < got.size() && failures < 5; ++i) {
        const double tol = abs_tol + rel_tol * std::abs(want[i]);
        if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tol)) {
            ++failures;
            ADD_FAILURE() << what << " i=" << i << " cpu=" << got[i] << " ref=" << want[i];
        }
    }
}

// read copies exactly the bytes asked for, from any offset: one thread below 256 KiB, the pool
// above (a step's logits); nothing outside the destination range is touched.
TEST(CpuOps, ReadCopiesEveryByteFromAnyOffsetOnOneThreadOrThePool) {
    for (int threads : {1, 3, 16}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        constexpr std::size_t kBuffer = (1u << 20) + 77;
        DeviceBuffer buffer = cpu.alloc(kBuffer);
        auto* bytes = static_cast<std::uint8_t*>(buffer.data());
        for (std::size_t i = 0; i < kBuffer; ++i) bytes[i] = static_cast<std::uint8_t>(i * 131 + 7);
        for (const std::size_t offset : {std::size_t{0}, std::size_t{3}, std::size_t{4096}}) {
            for (const std::size_t size :
                 {std::size_t{1}, std::size_t{1000}, std::size_t{(256u << 10) - 1},
                  std::size_t{256u << 10}, std::size_t{(1u << 20) - 5}, std::size_t{kBuffer}}) {
                if (offset + size > kBuffer) continue;
                std::vector<std::uint8_t> out(size + 2, 0xEE);
                cpu.read(buffer, offset, out.data() + 1, size);
                EXPECT_EQ(out.front(), 0xEE);
                EXPECT_EQ(out.back(), 0xEE);
                EXPECT_EQ(std::memcmp(out.data() + 1, bytes + offset, size), 0)
                    << "threads=" << threads << " offset=" << offset << " size=" << size;
            }
        }
    }
}

TEST(CpuOps, RmsNormOddWidthsAllWeightDtypesInPlace) {
    auto ref = reference();
    for (int threads : {1, 3}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
            for (std::int64_t d : {1, 7, 64, 899}) {
                for (std::int64_t n : {1, 3, 70}) {
                    auto wv = test::make_plain_weight(dt, 1, d, static_cast<std::uint32_t>(d), 1);
                    const WeightVector weight{dt, d, wv.view.data};
                    auto x = test::random_floats(static_cast<std::size_t>(n * d), 3, -4.0f, 4.0f);
                    std::vector<float> want(x.size());
                    ref->rms_norm(x.data(), weight, n, d, 1e-6f, want.data());
                    cpu.rms_norm(x.data(), weight, n, d, 1e-6f, x.data());  // in place
                    expect_all_near(x, want, 1e-7, 1e-5,
                                    "rms_norm d=" + std::to_string(d) + " n=" + std::to_string(n));
                }
            }
        }
    }
}

TEST(CpuOps, RopeMatchesReferenceBitForBit) {
    auto ref = reference();
    CpuBackend cpu(BackendOptions{3}, CpuTuning{});
    struct Shape {
        std::int64_t n_tokens, n_heads, head_dim, n_freq;
    };
    for (const Shape s : {Shape{1, 14, 64, 32}, Shape{17, 3, 96, 16}, Shape{300, 8, 64, 32}}) {
        std::vector<float> inv_freq(static_cast<std::size_t>(s.n_freq));
        for (std::int64_t i = 0; i < s.n_freq; ++i) {
            inv_freq[static_cast<std::size_t>(i)] =
                static_cast<float>(std::pow(1e6, -2.0 * static_cast<double>(i) / (2.0 * s.n_freq)));
        }
        std::vector<std::int32_t> pos(static_cast<std::size_t>(s.n_tokens));
        for (std::int64_t t = 0; t < s.n_tokens; ++t)
            pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(30000 + 7 * t);
        auto x =
            test::random_floats(static_cast<std::size_t>(s.n_tokens * s.n_heads * s.head_dim), 8);
        auto want = x;
        ref->rope(want.data(), s.n_tokens, s.n_heads, s.head_dim, pos.data(), inv_freq, 1.25f);
        cpu.rope(x.data(), s.n_tokens, s.n_heads, s.head_dim, pos.data(), inv_freq, 1.25f);
        // Same formula, same order: allow only FMA contraction differences.
        expect_all_near(x, want, 1e-6, 1e-6, "rope n_tokens=" + std::to_string(s.n_tokens));
    }
}

// The CPU backend keeps the angles of its last rope call (q and k of every layer share them):
// a call whose positions, frequencies or scaling differ in any one respect must not reuse them,
// and one that matches must give the same floats as a fresh computation.
TEST(CpuOps, RopeRecomputesAnglesWhenPositionsFrequenciesOrScalingChange) {
    auto ref = reference();
    CpuBackend cpu(BackendOptions{2}, CpuTuning{});
    const std::int64_t n_heads = 2, head_dim = 8;
    const std::vector<float> freq_a = {1.0f, 0.1f, 0.01f, 0.001f};
    const std::vector<float> freq_b = {1.0f, 0.1f, 0.01f, 0.002f};
    const std::vector<std::int32_t> pos_a = {5, 6, 7};
    const std::vector<std::int32_t> pos_b = {5, 6, 8};
    struct Call {
        const std::vector<std::int32_t>* pos;
        const std::vector<float>* freq;
        float scaling;
    };
    const Call calls[] = {{&pos_a, &freq_a, 1.0f}, {&pos_a, &freq_a, 1.0f},
                          {&pos_b, &freq_a, 1.0f}, {&pos_b, &freq_b, 1.0f},
                          {&pos_b, &freq_b, 0.5f}, {&pos_a, &freq_a, 1.0f}};
    int i = 0;
    for (const Call& c : calls) {
        const auto n_tokens = static_cast<std::int64_t>(c.pos->size());
        auto x = test::random_floats(static_cast<std::size_t>(n_tokens * n_heads * head_dim), 4);
        auto want = x;
        ref->rope(want.data(), n_tokens, n_heads, head_dim, c.pos->data(), *c.freq, c.scaling);
        cpu.rope(x.data(), n_tokens, n_heads, head_dim, c.pos->data(), *c.freq, c.scaling);
        expect_all_near(x, want, 1e-6, 1e-6, "rope call " + std::to_string(i++));
    }
}

struct AttnCase {
    std::int64_t n_q, n_kv, n_heads, n_kv_heads, head_dim, q_pos0;
};

// Attention arguments of case c over q, k and v (out left to the caller). A large scale makes
// the softmax peaky, so a wrong mask or max shows up clearly.
AttentionArgs attention_args(const AttnCase& c, const std::vector<float>& q,
                             const std::vector<float>& k, const std::vector<float>& v) {
    AttentionArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.n_q = c.n_q;
    a.n_kv = c.n_kv;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.q_pos0 = c.q_pos0;
    a.scale = 4.0f / std::sqrt(static_cast<float>(c.head_dim));
    return a;
}

// Keys of `rows` ([n_kv, kv_dim]) laid out in tiles (KeyLayout::kTiles), whole tiles, the
// lanes past n_kv set to `pad`.
template <class T>
std::vector<T> tile_keys(const std::vector<T>& rows, std::int64_t n_kv, std::int64_t kv_dim,
                         T pad) {
    const std::int64_t n_tiles = (n_kv + kKeyTile - 1) / kKeyTile;
    std::vector<T> tiled(static_cast<std::size_t>(n_tiles * kKeyTile * kv_dim), pad);
    for (std::int64_t i = 0; i < n_kv; ++i) {
        for (std::int64_t e = 0; e < kv_dim; ++e) {
            tiled[static_cast<std::size_t>(key_element_index(KeyLayout::kTiles, i, e, kv_dim))] =
                rows[static_cast<std::size_t>(i * kv_dim + e)];
        }
    }
    return tiled;
}

// K and V of a case as the KV cache keeps them (f16, keys in tiles, the padding lanes NaN),
// from the f32 rows that attention_args points at.
struct F16Cache {
    std::vector<std::uint16_t> k_tiles, v;
    F16Cache(const AttnCase& c, const std::vector<float>& k32, const std::vector<float>& v32) {
        std::vector<std::uint16_t> k16(k32.size());
        v.resize(v32.size());
        for (std::size_t i = 0; i < k32.size(); ++i) k16[i] = f32_to_f16(k32[i]);
        for (std::size_t i = 0; i < v32.size(); ++i) v[i] = f32_to_f16(v32[i]);
        k_tiles = tile_keys<std::uint16_t>(k16, c.n_kv, c.n_kv_heads * c.head_dim, 0x7E00);
    }
    // Points `a` at this cache instead of its f32 rows.
    void use_in(AttentionArgs& a) const {
        a.k = k_tiles.data();
        a.v = v.data();
        a.kv_dtype = DType::kF16;
        a.k_layout = KeyLayout::kTiles;
    }
};

// kv_dtype F16: K and V as the KV cache stores them by default, read by both backends.
// layout kTiles: keys in tiles (as the KV cache keeps f16 keys), the padding lanes NaN so that
// a score of a key past the context that reached the softmax shows.
void check_attention(Backend& cpu, const AttnCase& c, const std::string& label,
                     DType kv_dtype = DType::kF32, KeyLayout layout = KeyLayout::kRows) {
    auto ref = reference();
    const auto q = test::random_floats(static_cast<std::size_t>(c.n_q * c.n_heads * c.head_dim), 1);
    const auto k =
        test::random_floats(static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), 2);
    const auto v =
        test::random_floats(static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), 3);
    std::vector<float> out(q.size(), NAN), want(q.size(), NAN);
    AttentionArgs a = attention_args(c, q, k, v);
    std::vector<std::uint16_t> k16(k.size()), v16(v.size());
    if (kv_dtype == DType::kF16) {
        for (std::size_t i = 0; i < k.size(); ++i) k16[i] = f32_to_f16(k[i]);
        for (std::size_t i = 0; i < v.size(); ++i) v16[i] = f32_to_f16(v[i]);
        a.k = k16.data();
        a.v = v16.data();
        a.kv_dtype = DType::kF16;
    }
    const std::int64_t kv_dim = c.n_kv_heads * c.head_dim;
    std::vector<float> k_tiled;
    std::vector<std::uint16_t> k16_tiled;
    if (layout == KeyLayout::kTiles) {
        a.k_layout = layout;
        if (kv_dtype == DType::kF16) {
            k16_tiled = tile_keys<std::uint16_t>(k16, c.n_kv, kv_dim, 0x7E00);  // NaN
            a.k = k16_tiled.data();
        } else {
            k_tiled = tile_keys<float>(k, c.n_kv, kv_dim, NAN);
            a.k = k_tiled.data();
        }
    }
    a.out = want.data();
    ref->attention(a);
    a.out = out.data();
    cpu.attention(a);
    expect_all_near(out, want, 2e-5, 1e-5,
                    label + (kv_dtype == DType::kF16 ? " f16" : "") +
                        (layout == KeyLayout::kTiles ? " tiled" : "") +
                        " n_q=" + std::to_string(c.n_q) + " n_kv=" + std::to_string(c.n_kv) +
                        " heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
                        " d=" + std::to_string(c.head_dim) + " q_pos0=" + std::to_string(c.q_pos0));
}

TEST(CpuOps, AttentionPrefillAndDecodeWithGqaRatios) {
    for (int threads : {1, 2, 3}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        const std::string label = "threads=" + std::to_string(threads);
        // Ratios past 8 take a group's heads in two chunks (the kernel's scores hold 8 rows).
        for (std::int64_t ratio : {1, 2, 3, 4, 7, 10}) {
            for (std::int64_t d : {64, 36}) {
                const std::int64_t kvh = 2, heads = 2 * ratio;
                check_attention(cpu, {1, 1, heads, kvh, d, 0}, label);      // first token
                check_attention(cpu, {17, 17, heads, kvh, d, 0}, label);    // prefill
                check_attention(cpu, {70, 70, heads, kvh, d, 0}, label);    // prefill, blocks
                check_attention(cpu, {1, 41, heads, kvh, d, 40}, label);    // decode vs cache
                check_attention(cpu, {3, 103, heads, kvh, d, 100}, label);  // chunk vs cache
                check_attention(cpu, {17, 200, heads, kvh, d, 150},
                                label);  // keys past the chunk are masked
            }
        }
    }
}

// Keys and values in f16 with keys in tiles (the KV cache's format), f16 with keys in rows, and
// f32 with keys in tiles, against the reference's f32 values: decode over whole and partial
// tiles with key splits, prefill blocks whose causal limit ends mid-tile, GQA groups of every
// row count the tiled scores take in one pass (1-8) and past it (10), head_dim with a scalar
// tail (36, 5).
TEST(CpuOps, AttentionReadsF16AndTiledKeys) {
    for (int threads : {1, 3}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        const std::string label = "threads=" + std::to_string(threads);
        for (std::int64_t ratio : {1, 2, 3, 4, 5, 6, 7, 8, 10}) {
            for (std::int64_t d : {64, 36, 5}) {
                const std::int64_t kvh = 2, heads = 2 * ratio;
                for (const AttnCase& c :
                     {AttnCase{1, 1, heads, kvh, d, 0}, AttnCase{70, 70, heads, kvh, d, 0},
                      AttnCase{1, 48, heads, kvh, d, 47}, AttnCase{3, 103, heads, kvh, d, 100},
                      AttnCase{1, 1000, heads, kvh, d, 999}}) {
                    check_attention(cpu, c, label, DType::kF16, KeyLayout::kTiles);
                    check_attention(cpu, c, label, DType::kF16, KeyLayout::kRows);
                    check_attention(cpu, c, label, DType::kF32, KeyLayout::kTiles);
                }
            }
        }
    }
}

// The online softmax keeps a row's running maximum and rescales what it summed only when a
// key block holds a larger score. Keys whose scores grow along the context move the maximum in
// every block; shrinking ones never after the first; a spike (a key along the queries, scores
// ~100 above the rest: e^100 overflows f32 if the maximum is not followed) moves it once,
// mid-context. Each against the reference, f16 keys in tiles and f32 keys in rows, one thread
// and split-K.
TEST(CpuOps, AttentionFollowsTheMaximumAcrossKeyBlocks) {
    const AttnCase c{1, 700, 14, 2, 64, 699};
    const auto q = test::random_floats(static_cast<std::size_t>(c.n_heads * c.head_dim), 21);
    const auto v =
        test::random_floats(static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), 22);
    const std::int64_t kv_dim = c.n_kv_heads * c.head_dim;
    const std::int64_t group = c.n_heads / c.n_kv_heads;
    auto ref = reference();
    for (const std::string_view shape : {"growing", "shrinking", "spike"}) {
        auto k = test::random_floats(static_cast<std::size_t>(c.n_kv * kv_dim), 23);
        for (std::int64_t j = 0; j < c.n_kv; ++j) {
            const float x = static_cast<float>(j) / static_cast<float>(c.n_kv);
            const float gain = shape == "growing"     ? 0.2f + 2.0f * x
                               : shape == "shrinking" ? 2.2f - 2.0f * x
                                                      : 0.5f;
            for (std::int64_t e = 0; e < kv_dim; ++e) {
                float& ke = k[static_cast<std::size_t>(j * kv_dim + e)];
                // Key 400 of each KV head: 10x the first query of its group.
                ke = shape == "spike" && j == 400
                         ? 10.0f * q[static_cast<std::size_t>(e / c.head_dim * group * c.head_dim +
                                                              e % c.head_dim)]
                         : ke * gain;
            }
        }
        const F16Cache cache(c, k, v);
        for (const bool f16 : {false, true}) {
            AttentionArgs a = attention_args(c, q, k, v);
            if (f16) cache.use_in(a);
            std::vector<float> want(q.size(), NAN);
            a.out = want.data();
            ref->attention(a);
            for (const std::int64_t min_keys : {std::int64_t{1} << 20, std::int64_t{64}}) {
                CpuTuning tuning;
                tuning.min_keys_per_split = min_keys;
                CpuBackend cpu(BackendOptions{min_keys == 64 ? 3 : 1}, tuning);
                std::vector<float> out(q.size(), NAN);
                a.out = out.data();
                cpu.attention(a);
                expect_all_near(out, want, 2e-5, 1e-5,
                                std::string(shape) + (f16 ? " f16 tiled" : " f32") +
                                    " min_keys=" + std::to_string(min_keys));
            }
        }
    }
}

// A decode batch's attention in one call (one parallel region for all sequences) gives every
// sequence exactly the floats of its own attention call: same tiles, same splits, same merges.
// Sequences differ in context (no split, split, split with empty tails), query count and GQA
// ratio, and one has no queries at all.
TEST(CpuOps, AttentionManyEqualsOneCallPerSequence) {
    for (int threads : {1, 3, 4}) {
        CpuTuning tuning;
        tuning.min_keys_per_split = 16;
        CpuBackend cpu(BackendOptions{threads}, tuning);
        const std::vector<AttnCase> cases = {{1, 1000, 4, 1, 64, 999}, {1, 5, 14, 2, 64, 4},
                                             {3, 103, 8, 2, 36, 100},  {1, 20, 3, 3, 64, 19},
                                             {0, 10, 4, 2, 64, 10},    {1, 333, 6, 2, 36, 332}};
        std::vector<std::vector<float>> qs, ks, vs, singles, together;
        std::vector<std::vector<std::uint16_t>> k_tiles, v16;  // the KV cache's format
        std::vector<AttentionArgs> args;
        for (std::size_t i = 0; i < cases.size(); ++i) {
            const AttnCase& c = cases[i];
            const auto seed = static_cast<std::uint32_t>(10 + 3 * i);
            qs.push_back(test::random_floats(
                static_cast<std::size_t>(std::max<std::int64_t>(c.n_q, 1) * c.n_heads * c.head_dim),
                seed));
            ks.push_back(test::random_floats(
                static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), seed + 1));
            vs.push_back(test::random_floats(
                static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), seed + 2));
            singles.emplace_back(qs.back().size(), -7.0f);
            together.emplace_back(qs.back().size(), -7.0f);
            std::vector<std::uint16_t> k16(ks.back().size());
            v16.emplace_back(vs.back().size());
            for (std::size_t e = 0; e < k16.size(); ++e) {
                k16[e] = f32_to_f16(ks.back()[e]);
                v16.back()[e] = f32_to_f16(vs.back()[e]);
            }
            k_tiles.push_back(
                tile_keys<std::uint16_t>(k16, c.n_kv, c.n_kv_heads * c.head_dim, 0x7E00));
        }
        // F32 keys in rows, then f16 with tiled keys.
        for (const bool tiled : {false, true}) {
            args.clear();
            for (auto* outs : {&singles, &together}) {
                for (auto& o : *outs) std::fill(o.begin(), o.end(), -7.0f);
            }
            for (std::size_t i = 0; i < cases.size(); ++i) {
                AttentionArgs a = attention_args(cases[i], qs[i], ks[i], vs[i]);
                if (tiled) {
                    a.k = k_tiles[i].data();
                    a.v = v16[i].data();
                    a.kv_dtype = DType::kF16;
                    a.k_layout = KeyLayout::kTiles;
                }
                a.out = singles[i].data();
                cpu.attention(a);
                a.out = together[i].data();
                args.push_back(a);
            }
            cpu.attention_many(args);
            for (std::size_t i = 0; i < cases.size(); ++i) {
                EXPECT_EQ(together[i], singles[i])
                    << "sequence " << i << ", threads " << threads << (tiled ? ", tiled" : "");
            }
        }
    }
}

TEST(CpuOps, AttentionSplitsLongContextsAcrossThreads) {
    // 16 threads: decode shapes of Qwen2.5-0.5B and Llama-3.2-1B split the keys 16 and 32
    // ways, and their merges spread rows over several tasks.
    for (int threads : {2, 3, 16}) {
        CpuTuning tuning;
        tuning.min_keys_per_split = 16;  // force split-K on modest contexts
        CpuBackend cpu(BackendOptions{threads}, tuning);
        const std::string label = "split threads=" + std::to_string(threads);
        check_attention(cpu, {1, 1000, 4, 1, 64, 999}, label);
        check_attention(cpu, {1, 333, 6, 2, 36, 332}, label);
        check_attention(cpu, {2, 500, 8, 2, 64, 498}, label);
        check_attention(cpu, {1, 20, 3, 3, 64, 19}, label);  // splits with empty tails
        check_attention(cpu, {1, 530, 14, 2, 64, 529}, label);
        check_attention(cpu, {1, 530, 32, 8, 64, 529}, label);
    }
}

// Short decode contexts on 16 threads: tiles of half, a quarter, ... of the KV heads (8 KV
// heads at 530 positions: 2 heads x 8 splits; 2 at 200: 1 head x 3 splits; 6 at 300: 3 x 4),
// the heads' first blocks prefetched as their own runs, the splits merged per head group; each
// KV format against the reference, and the same with every head in each tile.
TEST(CpuOps, AttentionDecodeTilesOfSomeHeadsAtShortContexts) {
    for (const bool fewer : {true, false}) {
        CpuTuning tuning;
        tuning.attention_fewer_heads_per_tile = fewer;
        CpuBackend cpu(BackendOptions{16}, tuning);
        const std::string label = fewer ? "fewer heads per tile" : "every head per tile";
        for (const AttnCase& c :
             {AttnCase{1, 530, 32, 8, 64, 529}, AttnCase{1, 530, 14, 2, 64, 529},
              AttnCase{1, 200, 14, 2, 64, 199}, AttnCase{1, 300, 12, 6, 36, 299},
              AttnCase{1, 64, 32, 8, 64, 63}}) {
            check_attention(cpu, c, label, DType::kF16, KeyLayout::kTiles);
            check_attention(cpu, c, label, DType::kF16, KeyLayout::kRows);
            check_attention(cpu, c, label, DType::kF32, KeyLayout::kRows);
        }
    }
}

// Asking for lines ahead (CpuTuning::attention_stream_prefetch_keys) only moves data into the
// caches: every distance gives the floats of none, in decode tiles that ask past the end of the
// cache (exactly sized buffers) and in prefill tiles that do not ask at all; f16 keys in tiles
// and f32 keys in rows, split and whole contexts, GQA groups in one pass and in two.
TEST(CpuOps, AttentionStreamPrefetchLeavesTheFloatsAlone) {
    const std::vector<AttnCase> cases = {{1, 1000, 14, 2, 64, 999},
                                         {1, 530, 32, 8, 64, 529},
                                         {1, 77, 20, 2, 36, 76},
                                         {3, 103, 8, 2, 64, 100},
                                         {1, 1, 4, 1, 5, 0}};
    for (int threads : {1, 3}) {
        CpuTuning tuning;
        tuning.min_keys_per_split = 16;
        CpuBackend cpu(BackendOptions{threads}, tuning);
        for (std::size_t i = 0; i < cases.size(); ++i) {
            const AttnCase& c = cases[i];
            const auto seed = static_cast<std::uint32_t>(40 + 3 * i);
            const auto q =
                test::random_floats(static_cast<std::size_t>(c.n_q * c.n_heads * c.head_dim), seed);
            const auto k = test::random_floats(
                static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), seed + 1);
            const auto v = test::random_floats(
                static_cast<std::size_t>(c.n_kv * c.n_kv_heads * c.head_dim), seed + 2);
            const F16Cache cache(c, k, v);
            for (const bool tiled : {false, true}) {
                AttentionArgs a = attention_args(c, q, k, v);
                if (tiled) cache.use_in(a);
                std::vector<float> without(q.size(), -7.0f);
                tuning.attention_stream_prefetch_keys = 0;
                cpu.set_tuning(tuning);
                a.out = without.data();
                cpu.attention(a);
                for (const std::int64_t ahead : {1, 5, 64, 4096}) {
                    std::vector<float> with(q.size(), -7.0f);
                    tuning.attention_stream_prefetch_keys = ahead;
                    cpu.set_tuning(tuning);
                    a.out = with.data();
                    cpu.attention(a);
                    EXPECT_EQ(with, without) << "case " << i << ", " << ahead << " keys ahead, "
                                             << threads << " threads" << (tiled ? ", tiled" : "");
                }
            }
        }
    }
}

TEST(CpuOps, SiluMulAndAddIncludingAliasAndParallelSizes) {
    auto ref = reference();
    for (int threads : {1, 3}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        for (std::int64_t n : {1, 13, 100003}) {
            auto g = test::random_floats(static_cast<std::size_t>(n), 4, -30.0f, 30.0f);
            const auto u = test::random_floats(static_cast<std::size_t>(n), 5);
            std::vector<float> want(g.size());
            ref->silu_mul(g.data(), u.data(), n, want.data());
            cpu.silu_mul(g.data(), u.data(), n, g.data());  // out aliases gate
            expect_all_near(g, want, 1e-7, 1e-6, "silu_mul n=" + std::to_string(n));

            auto a = test::random_floats(static_cast<std::size_t>(n), 6);
            std::vector<float> sum(a.size());
            ref->add(a.data(), u.data(), n, sum.data());
            cpu.add(a.data(), u.data(), n, a.data());  // out aliases a
            expect_all_near(a, sum, 0.0, 0.0, "add n=" + std::to_string(n));
        }
    }
}

// Host tasks (a stage sampling a batch's requests): every index once, on the pool's threads
// where it has more than one, and none left running when the call returns; the Backend
// default runs them in order on the caller.
TEST(CpuOps, HostTasksRunEachIndexOnceOnThePool) {
    for (int threads : {1, 3}) {
        CpuBackend cpu(BackendOptions{threads}, CpuTuning{});
        for (std::int64_t n : {0, 1, 2, 7, 64}) {
            std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
            std::mutex mutex;
            std::set<std::thread::id> seen;
            for_each_host_task(cpu, n, [&](std::int64_t i) {
                // Long enough that the other threads claim some of the tasks.
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                runs[static_cast<std::size_t>(i)].fetch_add(1);
                std::lock_guard<std::mutex> lock(mutex);
                seen.insert(std::this_thread::get_id());
            });
            for (std::int64_t i = 0; i < n; ++i) {
                EXPECT_EQ(runs[static_cast<std::size_t>(i)].load(), 1)
                    << threads << " threads, task " << i << " of " << n;
            }
            if (threads > 1 && n >= 7) {
                EXPECT_GT(seen.size(), 1u) << n << " tasks ran on one thread";
            }
        }
    }
    auto reference = make_backend(BackendKind::kReference).value();
    std::vector<std::int64_t> order;
    for_each_host_task(*reference, 5, [&](std::int64_t i) { order.push_back(i); });
    EXPECT_EQ(order, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(CpuOps, SiluHandlesHugeNegativeGates) {
    CpuBackend cpu(BackendOptions{1}, CpuTuning{});
    std::vector<float> g = {-1000.0f, -89.0f, -88.0f, 0.0f, 50.0f, 1000.0f, -1e30f, 3.0f, 1e30f};
    const std::vector<float> u(g.size(), 2.0f);
    std::vector<float> out(g.size());
    cpu.silu_mul(g.data(), u.data(), static_cast<std::int64_t>(g.size()), out.data());
    for (std::size_t i = 0; i < g.size(); ++i) {
        const double want = 2.0 * g[i] / (1.0 + std::exp(-static_cast<double>(g[i])));
        EXPECT_TRUE(std::isfinite(out[i])) << g[i];
        EXPECT_NEAR(out[i], want, 1e-6 * (1.0 + std::abs(want))) << g[i];
    }
}

// The softmax's exponential (e^x for x <= 0, attention's scores minus their max): within 2 ulp
// of the exact value from -87 to 0, and no more than e^-87 below, on every compiled target.
TEST(CpuOps, SoftmaxExpIsWithinTwoUlpOnEveryTarget) {
    std::vector<float> x;
    for (int i = 0; i <= 400000; ++i) x.push_back(-87.0f * static_cast<float>(i) / 400000.0f);
    for (float v : {-0.0f, -1e-30f, -1e-7f, -0.34657359f, -0.6931472f, -86.99f, -87.5f, -100.0f,
                    -1e4f, -INFINITY}) {
        x.push_back(v);
    }
    std::vector<float> out(x.size());
    for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        softmax_exp(x.data(), static_cast<std::int64_t>(x.size()), out.data());
        double worst = 0.0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double want = std::exp(static_cast<double>(x[i]));
            if (x[i] < -87.0f) {
                EXPECT_LE(out[i], 1.7e-38f) << hwy::TargetName(target) << " x=" << x[i];
                EXPECT_GE(out[i], 0.0f) << hwy::TargetName(target) << " x=" << x[i];
                continue;
            }
            const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
            worst = std::max(worst, std::abs(out[i] - want) / ulp);
        }
        EXPECT_LE(worst, 2.0) << hwy::TargetName(target);
    }
    hwy::SetSupportedTargetsForTest(0);
}

TEST(CpuOps, EveryHighwayTargetAgrees) {
    auto ref = reference();
    for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        CpuBackend cpu(BackendOptions{2}, CpuTuning{});
        const std::string name = hwy::TargetName(target);
        check_attention(cpu, {5, 37, 6, 2, 36, 32}, name);
        // f16 keys and values, and a decode group of 7 rows (three pairs and one alone).
        check_attention(cpu, {5, 37, 6, 2, 36, 32}, name, DType::kF16);
        check_attention(cpu, {1, 100, 14, 2, 64, 99}, name, DType::kF16);
        // Tiled f16 keys (the KV cache's): groups of 7 and 4 rows, tail tiles, a prefill.
        check_attention(cpu, {1, 100, 14, 2, 64, 99}, name, DType::kF16, KeyLayout::kTiles);
        check_attention(cpu, {1, 45, 8, 2, 64, 44}, name, DType::kF16, KeyLayout::kTiles);
        check_attention(cpu, {5, 37, 6, 2, 36, 32}, name, DType::kF16, KeyLayout::kTiles);
        // KV rows stored as f16: every target gives f32_to_f16_saturated's bits (Highway's
        // emulated conversion truncates, so targets without F16C take the scalar path).
        auto rows = test::random_floats(1003, 5);
        for (std::size_t i = 0; i < rows.size(); ++i) {
            rows[i] = std::ldexp(rows[i], static_cast<int>(i % 48) - 30);
        }
        rows[7] = 1e9f;
        rows[8] = -7e4f;
        DeviceBuffer stored = cpu.alloc(rows.size() * 2);
        cpu.store_as(rows.data(), static_cast<std::int64_t>(rows.size()), DType::kF16, stored, 0);
        const auto* half = static_cast<const std::uint16_t*>(stored.data());
        int wrong = 0;
        for (std::size_t i = 0; i < rows.size() && wrong < 5; ++i) {
            if (half[i] != f32_to_f16_saturated(rows[i])) {
                ADD_FAILURE() << name << " store_as f16, element " << i << " = " << rows[i];
                ++wrong;
            }
        }
        // The same rows as tiled keys (17 rows of 59 from position 21 on): the reference's bits.
        const std::int64_t n_rows = 17, row_len = 59, pos0 = 21;
        const std::size_t tiled_bytes = static_cast<std::size_t>((pos0 + n_rows + kKeyTile - 1) /
                                                                 kKeyTile * kKeyTile * row_len * 2);
        DeviceBuffer tiled = cpu.alloc(tiled_bytes), tiled_ref = ref->alloc(tiled_bytes);
        cpu.store_key_tiles(rows.data(), n_rows, row_len, pos0, DType::kF16, tiled, 0);
        ref->store_key_tiles(rows.data(), n_rows, row_len, pos0, DType::kF16, tiled_ref, 0);
        EXPECT_EQ(std::memcmp(tiled.data(), tiled_ref.data(), tiled_bytes), 0)
            << name << " store_key_tiles";
        auto wv = test::make_plain_weight(DType::kBF16, 1, 99, 3, 1);
        const WeightVector weight{DType::kBF16, 99, wv.view.data};
        auto x = test::random_floats(3 * 99, 3);
        std::vector<float> y(x.size()), want(x.size());
        ref->rms_norm(x.data(), weight, 3, 99, 1e-5f, want.data());
        cpu.rms_norm(x.data(), weight, 3, 99, 1e-5f, y.data());
        expect_all_near(y, want, 1e-7, 1e-5, name + " rms_norm");
        ref->silu_mul(x.data(), want.data(), 297, y.data());
        std::vector<float> y2(x.size());
        cpu.silu_mul(x.data(), want.data(), 297, y2.data());
        expect_all_near(y2, y, 1e-7, 1e-6, name + " silu_mul");
    }
    hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace brigade::model::cpu
