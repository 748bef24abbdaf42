#pragma once
// Comparing what a mesh generated with the single-node reference: exact (F32 activations) or
// within a stated tolerance (BF16 activations, the default on the wire).

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "tests/integration/mesh_node/mesh_node_util.hpp"

namespace brigade::test {

// One BF16 rounding of the hidden state per hop. Measured on the demo model (`brigade run
// --layers` with the hidden state rounded to BF16 between two ranges): 0.004-0.007 nats on the
// top-5 logprobs after one hop at any split point; with KV built from rounded states too and up
// to two hops, 0.05 leaves room without hiding a wrong layer or a wrong position (those move
// logprobs by whole nats).
inline constexpr double kBf16LogprobTolerance = 0.05;
// A greedy choice whose two best logits are closer than this may flip under BF16 rounding.
inline constexpr double kBf16TieMargin = 0.1;
// F32 activations: the same arithmetic as one node; only the JSON round trip of the value.
inline constexpr double kF32LogprobTolerance = 1e-4;
// F32 activations, requests batched together: a batch computes keys and values with the
// batched matmul kernels (another summation order than one request alone, ~1e-7 apart), and
// the f16 KV cache's rounding turns that into whole f16 steps (2^-11) on a few elements:
// measured 1.1e-4 on the demo model. A mixed-up request moves logprobs by whole nats.
inline constexpr double kF32BatchedLogprobTolerance = 1e-3;

// `brigade run` results, computed once per (model, prompt, n) for the whole test binary.
inline const Reference& cached_reference(const std::filesystem::path& model,
                                         const std::string& prompt, int n, int vocab) {
    static std::mutex mutex;
    static std::map<std::tuple<std::string, std::string, int>, Reference> cache;
    std::lock_guard lock(mutex);
    const auto key = std::make_tuple(model.string(), prompt, n);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, reference_run(model, prompt, n, vocab)).first;
    return it->second;
}

// The generated tokens' strings of a /v1/completions reply with logprobs.
inline std::vector<std::string> reply_tokens(const nlohmann::json& reply) {
    std::vector<std::string> out;
    const auto& lp = reply["choices"][0]["logprobs"];
    if (!lp.is_object() || !lp.contains("tokens")) return out;
    for (const auto& t : lp["tokens"]) out.push_back(t.get<std::string>());
    return out;
}

// Sorted (best first) top logprob values at position i.
inline std::vector<double> reply_top_values(const nlohmann::json& reply, std::size_t i) {
    std::vector<double> out;
    const auto& top = reply["choices"][0]["logprobs"]["top_logprobs"];
    if (!top.is_array() || i >= top.size()) return out;
    for (const auto& [token, value] : top[i].items()) out.push_back(value.get<double>());
    std::sort(out.rbegin(), out.rend());
    return out;
}

inline std::vector<double> reference_top_values(const std::vector<float>& logits, std::size_t k) {
    double max = logits[0];
    for (float v : logits) max = std::max(max, static_cast<double>(v));
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
    const double log_z = max + std::log(sum);
    std::vector<double> lp(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) lp[i] = static_cast<double>(logits[i]) - log_z;
    k = std::min(k, lp.size());
    std::partial_sort(lp.begin(), lp.begin() + static_cast<std::ptrdiff_t>(k), lp.end(),
                      std::greater<>());
    lp.resize(k);
    return lp;
}

// Exact: same text, same number of tokens, each chosen token's logprob within 1e-4 (or
// `tolerance`).
inline void expect_exact(const HttpReply& r, const Reference& ref, const std::string& where,
                         double tolerance = kF32LogprobTolerance) {
    ASSERT_EQ(r.status, 200) << where << ": " << r.body;
    EXPECT_EQ(completion_text(r), ref.text) << where;
    const auto lps = token_logprobs(r.json);
    ASSERT_EQ(lps.size(), ref.ids.size()) << where << ": " << r.body;
    for (std::size_t i = 0; i < lps.size(); ++i) {
        EXPECT_NEAR(lps[i], logprob_of(ref.logits[i], ref.ids[i]), tolerance)
            << where << ", token " << i;
    }
}

// BF16: while the text agrees with the reference, every token's logprob and its top-k logprob
// values are within kBf16LogprobTolerance; where the text first differs, the reference's choice
// must have been a near tie. Returns how many positions were compared.
inline std::size_t expect_within_bf16_tolerance(const HttpReply& r, const Reference& ref,
                                                const std::string& where, std::size_t top_k) {
    EXPECT_EQ(r.status, 200) << where << ": " << r.body;
    if (r.status != 200) return 0;
    const auto text = completion_text(r);
    const auto tokens = reply_tokens(r.json);
    const auto lps = token_logprobs(r.json);
    EXPECT_EQ(tokens.size(), lps.size()) << r.body;
    std::size_t common = 0;
    while (common < text.size() && common < ref.text.size() && text[common] == ref.text[common]) {
        ++common;
    }
    std::size_t offset = 0;
    std::size_t compared = 0;
    double worst = 0;
    for (std::size_t i = 0; i < tokens.size() && i < lps.size() && i < ref.ids.size(); ++i) {
        offset += tokens[i].size();
        const bool same_so_far = offset <= common || (text == ref.text);
        if (!same_so_far) {
            const double margin = top2_margin(ref.logits[i]);
            EXPECT_LT(margin, kBf16TieMargin)
                << where << ": token " << i << " differs from the reference, whose top-2 logit "
                << "margin there was " << margin << "\nmesh: " << text << "\nref:  " << ref.text;
            break;
        }
        const double d = std::abs(lps[i] - logprob_of(ref.logits[i], ref.ids[i]));
        worst = std::max(worst, d);
        EXPECT_LE(d, kBf16LogprobTolerance) << where << ", token " << i;
        const auto got = reply_top_values(r.json, i);
        const auto want = reference_top_values(ref.logits[i], got.size());
        for (std::size_t k = 0; k < got.size(); ++k) {
            EXPECT_NEAR(got[k], want[k], kBf16LogprobTolerance) << where << ", token " << i;
        }
        EXPECT_EQ(got.size(), top_k) << where << ", token " << i;
        ++compared;
    }
    std::printf("[ bf16     ] %s: %zu tokens compared, worst |logprob diff| %.4f, %s\n",
                where.c_str(), compared, worst,
                text == ref.text ? "text identical" : "text diverged at a near tie");
    return compared;
}

}  // namespace brigade::test
