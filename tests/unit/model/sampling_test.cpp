#include "model/sampling.hpp"

#include <gtest/gtest.h>

// clang-format off
#include "model/cpu/simd_targets.hpp"  // the targets the kernels are built for, before hwy
#include <hwy/targets.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/cpu/cpu_backend.hpp"
#include "model/logit_math.hpp"

namespace brigade::model {
namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
    std::vector<float> l;
    for (double v : p) l.push_back(static_cast<float>(std::log(v)));
    return l;
}

// n logits drawn from a normal distribution of deviation `sigma`.
std::vector<float> normal_row(std::mt19937& rng, std::size_t n, float sigma) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
    SamplingParams p;
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
    EXPECT_EQ(sample_token(logits, p, {}, 0).token, 1);
    EXPECT_EQ(sample_token(logits, p, {}, 7).token, 1);
}

TEST(Sampling, SameSeedSameTokensAndStepsAreIndependent) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 1234;
    const auto logits = log_probs({0.25, 0.25, 0.25, 0.25});
    std::vector<std::int32_t> a, b, c;
    for (int t = 0; t < 64; ++t) {
        a.push_back(sample_token(logits, p, {}, t).token);
        b.push_back(sample_token(logits, p, {}, t).token);
    }
    p.seed = 1235;
    for (int t = 0; t < 64; ++t) c.push_back(sample_token(logits, p, {}, t).token);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    // Resuming at step 40 (e.g. on another node) gives the token the loop gave.
    p.seed = 1234;
    EXPECT_EQ(sample_token(logits, p, {}, 40).token, a[40]);
}

TEST(Sampling, UniformDrawIsUniform) {
    double sum = 0.0;
    int low = 0;
    const int n = 100000;
    for (int t = 0; t < n; ++t) {
        const double u = uniform_draw(99, static_cast<std::uint64_t>(t));
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
        low += u < 0.1 ? 1 : 0;
    }
    EXPECT_NEAR(sum / n, 0.5, 0.01);
    EXPECT_NEAR(static_cast<double>(low) / n, 0.1, 0.01);
    EXPECT_NE(uniform_draw(1, 0), uniform_draw(0, 1));
}

TEST(Sampling, FrequenciesFollowTheSoftmax) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 5;
    const auto logits = log_probs({0.5, 0.3, 0.2});
    std::vector<int> counts(3, 0);
    const int n = 20000;
    for (int t = 0; t < n; ++t) ++counts[sample_token(logits, p, {}, t).token];
    EXPECT_NEAR(counts[0] / double(n), 0.5, 0.015);
    EXPECT_NEAR(counts[1] / double(n), 0.3, 0.015);
    EXPECT_NEAR(counts[2] / double(n), 0.2, 0.015);
    // Temperature 0.5 squares the probabilities (renormalized): 25/38, 9/38, 4/38.
    p.temperature = 0.5f;
    counts.assign(3, 0);
    for (int t = 0; t < n; ++t) ++counts[sample_token(logits, p, {}, t).token];
    EXPECT_NEAR(counts[0] / double(n), 25.0 / 38, 0.015);
    EXPECT_NEAR(counts[2] / double(n), 4.0 / 38, 0.015);
}

TEST(Sampling, TopKTopPMinPFilter) {
    const auto logits = log_probs({0.4, 0.3, 0.15, 0.1, 0.05});
    SamplingParams p;
    p.temperature = 1.0f;
    auto seen = [&](const SamplingParams& params) {
        std::vector<int> counts(5, 0);
        for (int t = 0; t < 4000; ++t) ++counts[sample_token(logits, params, {}, t).token];
        return counts;
    };
    p.top_k = 2;
    auto k = seen(p);
    EXPECT_GT(k[0], 0);
    EXPECT_GT(k[1], 0);
    EXPECT_EQ(k[2] + k[3] + k[4], 0);
    // top_p 0.8: 0.4 + 0.3 = 0.7 < 0.8, so the third token is needed; the fourth is not.
    p.top_k = 0;
    p.top_p = 0.8f;
    auto tp = seen(p);
    EXPECT_GT(tp[2], 0);
    EXPECT_EQ(tp[3] + tp[4], 0);
    // min_p 0.3: keep p >= 0.12 -> tokens 0, 1, 2.
    p.top_p = 1.0f;
    p.min_p = 0.3f;
    auto mp = seen(p);
    EXPECT_GT(mp[2], 0);
    EXPECT_EQ(mp[3] + mp[4], 0);
    // top_k 1 is greedy whatever the temperature.
    p.min_p = 0.0f;
    p.top_k = 1;
    p.temperature = 5.0f;
    auto g = seen(p);
    EXPECT_EQ(g[0], 4000);
}

TEST(Sampling, RepetitionPenaltyHasHuggingFaceSemantics) {
    SamplingParams p;
    p.repetition_penalty = 2.0f;
    const std::vector<float> logits = {4.0f, -4.0f, 1.0f, 3.0f};
    const std::vector<std::int32_t> prompt = {0, 0, 1};
    const std::vector<std::int32_t> generated = {0};
    auto out = process_logits(logits, p, {prompt, generated});
    EXPECT_FLOAT_EQ(out[0], 2.0f);   // positive: divided once, however often it occurs
    EXPECT_FLOAT_EQ(out[1], -8.0f);  // negative: multiplied
    EXPECT_FLOAT_EQ(out[2], 1.0f);
    EXPECT_FLOAT_EQ(out[3], 3.0f);
    EXPECT_EQ(sample_token(logits, p, {prompt, generated}, 0).token, 3);
}

TEST(Sampling, PresenceAndFrequencyPenaltiesUseGeneratedTokensOnly) {
    SamplingParams p;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    const std::vector<float> logits = {1.0f, 1.0f, 1.0f};
    const std::vector<std::int32_t> prompt = {2, 2, 2};
    const std::vector<std::int32_t> generated = {0, 0, 1};
    auto out = process_logits(logits, p, {prompt, generated});
    EXPECT_FLOAT_EQ(out[0], 1.0f - 0.5f - 2 * 0.25f);
    EXPECT_FLOAT_EQ(out[1], 1.0f - 0.5f - 0.25f);
    EXPECT_FLOAT_EQ(out[2], 1.0f);
}

TEST(Sampling, LogprobIsLogSoftmaxOfProcessedLogits) {
    SamplingParams p;
    p.temperature = 2.0f;
    p.seed = 3;
    const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
    auto t = sample_token(logits, p, {}, 0);
    auto lp = log_softmax(process_logits(logits, p, {}));
    EXPECT_FLOAT_EQ(t.logprob, lp[static_cast<std::size_t>(t.token)]);
    double total = 0;
    for (float v : lp) total += std::exp(v);
    EXPECT_NEAR(total, 1.0, 1e-6);
    EXPECT_NEAR(lp[2] - lp[1], 0.5, 1e-6);
}

// Sampler sorts only as far as a draw reaches; the reference sorts everything. Over row shapes
// that put the draw in the sorted head, in the lazily sorted tail (logits spread far beyond
// the head's span), on ties and on masked (-inf) tokens, every parameter combination must pick
// the reference's token, with the logprob to 1e-5.
TEST(Sampling, SamplerPicksTheReferenceTokenWithoutSortingEverything) {
    std::mt19937 rng(11);
    struct Row {
        std::string what;
        std::vector<float> logits;
    };
    std::vector<Row> rows;
    auto spiked_row = [&](std::size_t n, float sigma, float spike) {
        auto v = normal_row(rng, n, sigma);
        if (spike != 0.0f) v[n / 3] = spike;
        return v;
    };
    rows.push_back({"peaked 50k", spiked_row(50000, 2.5f, 24.0f)});
    rows.push_back({"flat 50k", spiked_row(50000, 0.5f, 0.0f)});
    rows.push_back({"wide 20k (most beyond the sorted head)", normal_row(rng, 20000, 12.0f)});
    rows.push_back({"tiny", {0.1f, -3.0f, 2.0f, 2.0f, 0.5f, -40.0f, 1.0f}});
    auto ties = normal_row(rng, 3000, 2.0f);
    for (auto& x : ties) x = std::round(x * 2.0f) / 2.0f;
    rows.push_back({"ties", ties});
    auto masked = normal_row(rng, 5000, 3.0f);
    for (std::size_t i = 0; i < masked.size(); i += 3) {
        masked[i] = -std::numeric_limits<float>::infinity();
    }
    rows.push_back({"masked", masked});
    // Rows long enough for Sampler's block selection of the first candidates: 200 ties at the
    // top spread over many blocks (the first 64 are the lowest ids), and a row masked but for
    // 30 entries (the first candidates include -inf ones).
    auto top_ties = normal_row(rng, 30000, 1.0f);
    for (std::size_t i = 0; i < 200; ++i) top_ties[(i * 7919) % top_ties.size()] = 6.0f;
    rows.push_back({"200 ties at the top", top_ties});
    std::vector<float> mostly_masked(20000, -std::numeric_limits<float>::infinity());
    for (std::size_t i = 0; i < 30; ++i) mostly_masked[i * 613 + 5] = static_cast<float>(i % 7);
    rows.push_back({"masked but for 30", mostly_masked});
    // 63 equal tops, each in its own block, and the 64th candidate alone in another block just
    // below them: its block's maximum is the bound the selection of the first 64 rests on.
    auto edge = normal_row(rng, 30000, 1.0f);
    for (std::size_t i = 0; i < 63; ++i) edge[i * 401 + 17] = 10.0f;
    edge[29000] = 9.99f;
    rows.push_back({"the first block's last candidate", edge});

    std::vector<std::pair<std::string, SamplingParams>> settings;
    auto add = [&](std::string name, float t, int k, float top_p, float min_p, float rep,
                   float pres, float freq) {
        SamplingParams p;
        p.temperature = t;
        p.top_k = k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.repetition_penalty = rep;
        p.presence_penalty = pres;
        p.frequency_penalty = freq;
        p.seed = 77;
        settings.push_back({std::move(name), p});
    };
    add("greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("t=1", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("t=2.5", 2.5f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("t=0.7 top_p=0.9", 0.7f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("t=1 top_p=0.999", 1.0f, 0, 0.999f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("top_k=1", 1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("top_k=40", 0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("top_k=5000 top_p=0.95", 1.3f, 5000, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f);
    add("min_p=0.05", 1.0f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f);
    add("min_p=0.001 top_p=0.8", 1.5f, 0, 0.8f, 0.001f, 1.0f, 0.0f, 0.0f);
    add("penalties", 0.9f, 0, 0.95f, 0.0f, 1.3f, 0.5f, 0.4f);
    add("greedy + penalties", 0.0f, 0, 1.0f, 0.0f, 1.7f, 1.0f, 0.2f);

    const std::vector<std::int32_t> prompt = {5, 3, 3, 1, 0, 2, 4000, 17, 17, -1, 60000};
    const std::vector<std::int32_t> generated = {2, 2, 3, 19, 2, 1200, 4999};
    const TokenHistory history{prompt, generated};
    Sampler sampler;  // one sampler across all calls, as a decode loop uses it
    int compared = 0;
    for (const auto& row : rows) {
        for (const auto& [name, p] : settings) {
            for (std::uint64_t step = 0; step < 40; ++step) {
                const auto want = reference_sample_token(row.logits, p, history, step);
                const auto got = sampler.sample(row.logits, p, history, step);
                ASSERT_EQ(got.token, want.token) << row.what << ", " << name << ", step " << step;
                ASSERT_NEAR(got.logprob, want.logprob, 1e-5)
                    << row.what << ", " << name << ", step " << step;
                ++compared;
            }
        }
    }
    EXPECT_EQ(compared, 9 * 12 * 40);
}

// The SIMD passes (logit_math.cpp: the normalizer, the deep draws' buckets) on every Highway
// target this machine runs: a flat row and settings whose draws go past the sorted prefix.
TEST(Sampling, EveryHighwayTargetPicksTheReferenceToken) {
    std::mt19937 rng(23);
    auto flat = normal_row(rng, 30011, 0.5f);  // odd: the vector loops end in a scalar tail
    flat[77] = flat[78];                       // a tie across the sorted prefix's edge is possible
    std::vector<SamplingParams> settings(3);
    settings[0].temperature = 1.0f;
    settings[1].temperature = 0.7f;
    settings[1].top_p = 0.9f;
    settings[2].temperature = 1.2f;
    settings[2].min_p = 0.2f;
    const auto targets = hwy::SupportedAndGeneratedTargets();
    ASSERT_FALSE(targets.empty());
    for (std::int64_t target : targets) {
        hwy::SetSupportedTargetsForTest(target);
        Sampler sampler;
        for (std::size_t s = 0; s < settings.size(); ++s) {
            settings[s].seed = 9 + s;
            for (std::uint64_t step = 0; step < 12; ++step) {
                const auto want = reference_sample_token(flat, settings[s], {}, step);
                const auto got = sampler.sample(flat, settings[s], {}, step);
                EXPECT_EQ(got.token, want.token)
                    << hwy::TargetName(target) << ", setting " << s << ", step " << step;
            }
        }
    }
    hwy::SetSupportedTargetsForTest(0);
}

// A row's passes in chunks on a pool (one request alone: its sampler uses the stage's threads)
// give the token, the logprob and the stats of one thread, bit for bit: the chunks are fixed by
// the row's length and combined in order. Rows of one chunk to ten (a 151,936-token vocabulary),
// every setting kind, with penalties (and the reference's token where the row is short enough
// to sort); the pool must actually have run the chunks.
TEST(Sampling, ChunksOnThePoolGiveTheFloatsOfOneThread) {
    std::mt19937 rng(31);
    std::vector<std::vector<float>> rows;
    for (const std::size_t n : {7u, 16384u, 50001u, 151936u}) {
        auto v = normal_row(rng, n, n % 2 == 0 ? 2.5f : 0.5f);
        v[n / 2] = 40.0f;
        v[n - 1] = v[n / 2];  // a tie for the maximum in the last chunk
        rows.push_back(std::move(v));
    }
    std::vector<SamplingParams> settings(6);
    settings[1].temperature = 1.0f;
    settings[2].temperature = 0.7f;
    settings[2].top_p = 0.9f;
    settings[3].temperature = 0.8f;
    settings[3].top_k = 40;
    settings[4].temperature = 1.2f;
    settings[4].min_p = 0.05f;
    settings[5].temperature = 0.9f;
    settings[5].repetition_penalty = 1.3f;
    settings[5].presence_penalty = 0.5f;
    settings[5].frequency_penalty = 0.4f;
    const std::vector<std::int32_t> prompt = {5, 3, 3, 1, 0, 6};
    const std::vector<std::int32_t> generated = {2, 2, 3, 6000};
    const TokenHistory history{prompt, generated};
    cpu::CpuBackend pool(BackendOptions{3}, cpu::CpuTuning{});
    Sampler alone, chunked;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const LogitStats want = logit_stats(rows[r]);
        const std::uint64_t before = pool.n_dispatches();
        const LogitStats got = logit_stats(rows[r], &pool);
        EXPECT_EQ(got.max, want.max) << "row " << r;
        EXPECT_EQ(got.argmax, want.argmax) << "row " << r;
        EXPECT_EQ(got.argmax, static_cast<std::int64_t>(rows[r].size() / 2)) << "row " << r;
        EXPECT_EQ(got.sum_exp, want.sum_exp) << "row " << r;
        EXPECT_EQ(pool.n_dispatches() - before, rows[r].size() > 16384 ? 2u : 0u) << "row " << r;
        for (std::size_t s = 0; s < settings.size(); ++s) {
            settings[s].seed = 5 + s;
            for (std::uint64_t step = 0; step < 6; ++step) {
                const auto a = alone.sample(rows[r], settings[s], history, step);
                const auto b = chunked.sample(rows[r], settings[s], history, step, &pool);
                EXPECT_EQ(b.token, a.token)
                    << "row " << r << ", setting " << s << ", step " << step;
                EXPECT_EQ(b.logprob, a.logprob)
                    << "row " << r << ", setting " << s << ", step " << step;
                if (rows[r].size() < 100000) {  // the reference sorts every candidate
                    EXPECT_EQ(b.token,
                              reference_sample_token(rows[r], settings[s], history, step).token)
                        << "row " << r << ", setting " << s << ", step " << step;
                }
            }
        }
    }
}

// The deep draws' bucket passes (logit_math.hpp) in chunks on a pool, against one thread: the
// same bucket for every candidate, the same members of a bucket in ascending order, masses
// within the rounding of another summation order, and the sorted prefix's candidates (`skip`)
// in no bucket's mass; with and without min-p. The pool must have run the chunks.
TEST(Sampling, BucketPassesOnThePoolMatchOneThread) {
    std::mt19937 rng(57);
    auto row = normal_row(rng, 151936, 0.5f);
    for (std::size_t i = 0; i < row.size(); i += 97)
        row[i] = -std::numeric_limits<float>::infinity();
    row[4000] = row[4001] = 1.25f;  // a tie at the pivot: the lower id is in the prefix
    CandidateBuckets spec;
    spec.max = *std::max_element(row.begin(), row.end());
    spec.total = 0.0;
    for (float v : row) spec.total += std::exp(static_cast<double>(v) - spec.max);
    spec.scale = 4096 / 20.0;
    spec.last = 4095;
    spec.dropped = 4096;
    spec.skip = 0xFFFF;
    spec.pivot_logit = 1.25f;
    spec.pivot_id = 4000;
    cpu::CpuBackend pool(BackendOptions{3}, cpu::CpuTuning{});
    for (const double min_prob : {0.0, 2e-6}) {
        spec.min_prob = min_prob;
        double want_total = 0.0;  // every candidate past the prefix, min-p's dropped included
        for (std::size_t i = 0; i < row.size(); ++i) {
            const bool prefix = row[i] > spec.pivot_logit || (row[i] == spec.pivot_logit &&
                                                              static_cast<std::int32_t>(i) <= 4000);
            if (!prefix)
                want_total += std::exp(static_cast<double>(row[i]) - spec.max) / spec.total;
        }
        std::vector<std::uint16_t> bucket[2];
        std::vector<double> mass[2];
        std::vector<double> chunk_mass;
        for (int h = 0; h < 2; ++h) {
            bucket[h].assign(row.size(), 0);
            mass[h].assign(spec.dropped + 1, 0.0);
            const std::uint64_t before = pool.n_dispatches();
            ASSERT_TRUE(bucket_candidates(row, spec, bucket[h].data(), mass[h].data(),
                                          h == 1 ? &pool : nullptr, chunk_mass));
            if (h == 1) {
                EXPECT_GE(pool.n_dispatches() - before, 2u);
            }
        }
        ASSERT_EQ(bucket[1], bucket[0]) << "min_p " << min_prob;
        EXPECT_EQ(bucket[1][4000], spec.skip);
        EXPECT_NE(bucket[1][4001], spec.skip);
        double total = 0.0;
        for (std::size_t b = 0; b < mass[0].size(); ++b) {
            EXPECT_NEAR(mass[1][b], mass[0][b], 1e-15) << "bucket " << b;
            total += mass[1][b];
        }
        EXPECT_NEAR(total, want_total, 1e-12) << "min_p " << min_prob;
        if (min_prob > 0.0) {
            EXPECT_GT(mass[1][spec.dropped], 0.0);
        }
        std::vector<std::int32_t> got(row.size()), want;
        for (const std::uint16_t b : {std::uint16_t{0}, std::uint16_t{40}, std::uint16_t{700},
                                      std::uint16_t{4095}, spec.dropped, spec.skip}) {
            want.clear();
            for (std::size_t i = 0; i < row.size(); ++i) {
                if (bucket[0][i] == b) want.push_back(static_cast<std::int32_t>(i));
            }
            const std::uint64_t before = pool.n_dispatches();
            const std::int64_t n = bucket_members(bucket[0], b, got.data(), &pool);
            EXPECT_GE(pool.n_dispatches() - before, 1u);
            ASSERT_EQ(std::vector<std::int32_t>(got.begin(), got.begin() + n), want)
                << "bucket " << b << ", min_p " << min_prob;
            ASSERT_EQ(bucket_members(bucket[0], b, got.data()), n);
        }
    }
}

// top_logprobs: the k most likely tokens of the processed row, best first, ties to the lower id,
// as logit - log Z with logit_stats' normalizer (what the API reported before, from a sort of
// every candidate, kept here as the definition), and the drawn token's entry is its logprob.
// Rows: short (every candidate keyed), 200 ties at the top spread over blocks, masked entries,
// and a 151,936 vocabulary; greedy, temperature and penalties.
TEST(Sampling, MostLikelyAreTheSortedHeadOfTheProcessedRow) {
    std::mt19937 rng(41);
    std::vector<std::vector<float>> rows;
    rows.push_back({0.1f, -3.0f, 2.0f, 2.0f, 0.5f, -40.0f, 1.0f});
    for (const std::size_t n : {30000u, 151936u}) {
        auto v = normal_row(rng, n, 2.5f);
        rows.push_back(v);
        for (std::size_t i = 0; i < 200; ++i) v[(i * 7919) % n] = 9.0f;
        for (std::size_t i = 0; i < n; i += 5) v[i] = -std::numeric_limits<float>::infinity();
        rows.push_back(std::move(v));
    }
    std::vector<SamplingParams> settings(3);
    settings[1].temperature = 0.7f;
    settings[1].top_p = 0.9f;
    settings[1].seed = 3;
    settings[2].temperature = 1.3f;
    settings[2].repetition_penalty = 1.5f;
    settings[2].frequency_penalty = 0.5f;
    settings[2].seed = 4;
    const std::vector<std::int32_t> prompt = {2, 3, 7919, 15838};
    const std::vector<std::int32_t> generated = {2, 6};
    const TokenHistory history{prompt, generated};
    Sampler sampler;
    std::vector<SampledToken> top;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        for (std::size_t s = 0; s < settings.size(); ++s) {
            const auto processed = process_logits(rows[r], settings[s], history);
            const auto stats = logit_stats(processed);
            const double log_z = static_cast<double>(stats.max) + std::log(stats.sum_exp);
            std::vector<std::int32_t> order(processed.size());
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
                return processed[static_cast<std::size_t>(a)] >
                       processed[static_cast<std::size_t>(b)];
            });
            for (const std::size_t k : {1u, 5u, 20u}) {
                const auto drawn = sampler.sample(rows[r], settings[s], history, 9);
                sampler.most_likely(k, top);
                const std::string label = "row " + std::to_string(r) + ", setting " +
                                          std::to_string(s) + ", k " + std::to_string(k);
                ASSERT_EQ(top.size(), std::min(k, processed.size())) << label;
                for (std::size_t i = 0; i < top.size(); ++i) {
                    EXPECT_EQ(top[i].token, order[i]) << label << ", rank " << i;
                    const double logit = processed[static_cast<std::size_t>(order[i])];
                    EXPECT_EQ(top[i].logprob, static_cast<float>(logit - log_z)) << label;
                    if (top[i].token == drawn.token) {
                        EXPECT_EQ(top[i].logprob, drawn.logprob);
                    }
                }
            }
        }
    }
}

// A corrupt checkpoint can yield NaN logits: whatever is picked must still be a token id of
// the vocabulary (a later stage or the detokenizer indexes by it).
// (Also with the passes in chunks on a pool, and the top_logprobs of such a row.)
TEST(Sampling, NanLogitsStillGiveATokenInTheVocabulary) {
    std::vector<float> mixed(1000, std::numeric_limits<float>::quiet_NaN());
    for (std::size_t i = 0; i < mixed.size(); i += 7) mixed[i] = static_cast<float>(i % 13);
    const std::vector<float> row = mixed;
    const std::vector<float> all_nan(300, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> long_nan(40000, 1.0f);  // three chunks, a NaN in the last
    long_nan[39000] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> long_row = long_nan;
    cpu::CpuBackend pool(BackendOptions{3}, cpu::CpuTuning{});
    Sampler sampler;
    std::vector<SampledToken> top;
    for (const auto* r : {&row, &all_nan, &long_row}) {
        for (Backend* host : {static_cast<Backend*>(nullptr), static_cast<Backend*>(&pool)}) {
            for (float t : {0.0f, 1.0f}) {
                SamplingParams p;
                p.temperature = t;
                p.top_p = t > 0.0f ? 0.9f : 1.0f;
                for (std::uint64_t step = 0; step < 5; ++step) {
                    const auto got = sampler.sample(*r, p, {}, step, host);
                    EXPECT_GE(got.token, 0);
                    EXPECT_LT(got.token, static_cast<std::int32_t>(r->size()));
                    sampler.most_likely(3, top);
                    ASSERT_EQ(top.size(), 3u);
                    for (const auto& e : top) {
                        EXPECT_GE(e.token, 0);
                        EXPECT_LT(e.token, static_cast<std::int32_t>(r->size()));
                    }
                }
            }
        }
    }
}

TEST(Sampling, ParameterValidation) {
    EXPECT_TRUE(validate_sampling_params({}));
    SamplingParams p;
    p.temperature = -0.1f;
    EXPECT_FALSE(validate_sampling_params(p));
    p = {};
    p.top_p = 0.0f;
    EXPECT_FALSE(validate_sampling_params(p));
    p = {};
    p.min_p = 1.5f;
    EXPECT_FALSE(validate_sampling_params(p));
    p = {};
    p.repetition_penalty = 0.0f;
    EXPECT_FALSE(validate_sampling_params(p));
    p = {};
    p.frequency_penalty = 3.0f;
    EXPECT_FALSE(validate_sampling_params(p));
    p = {};
    p.top_k = -1;
    EXPECT_FALSE(validate_sampling_params(p));
}

}  // namespace
}  // namespace brigade::model
