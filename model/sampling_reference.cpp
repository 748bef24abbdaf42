// The plain implementation of sampling: every candidate sorted, all sums in double. It defines
// the tokens Sampler must pick (tests/unit/model/sampling_test.cpp) and is the baseline of
// bench/sampling_bench.cpp; nothing on the serving path calls it.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "model/logit_math.hpp"
#include "model/sampling.hpp"

namespace brigade::model {
namespace {

std::int32_t argmax(std::span<const float> x) {
    // First maximum, as torch.argmax: ties go to the lowest id.
    std::size_t best = 0;
    for (std::size_t i = 1; i < x.size(); ++i) {
        if (x[i] > x[best]) best = i;
    }
    return static_cast<std::int32_t>(best);
}

}  // namespace

SampledToken reference_sample_token(std::span<const float> logits, const SamplingParams& p,
                                    const TokenHistory& history, std::uint64_t step) {
    const std::vector<float> processed = process_logits(logits, p, history);
    SampledToken result;
    if (processed.empty()) return result;
    const float max = *std::max_element(processed.begin(), processed.end());
    // The softmax normalizer of the whole row is logit_stats' sum, here as in Sampler, so the
    // two agree to the bit rather than to the ~1e-7 between float and double exponentials
    // (enough to move a draw that lands near the edge of a token's share).
    const double sum = logit_stats(processed).sum_exp;
    const double log_z = static_cast<double>(max) + std::log(sum);
    auto logprob_of = [&](std::int32_t t) {
        return static_cast<float>(static_cast<double>(processed[static_cast<std::size_t>(t)]) -
                                  log_z);
    };
    if (p.greedy()) {
        result.token = argmax(processed);
        result.logprob = logprob_of(result.token);
        return result;
    }

    // Candidates by descending logit, ties by ascending id, so the order is deterministic.
    std::vector<std::int32_t> order(processed.size());
    std::iota(order.begin(), order.end(), 0);
    std::size_t keep = order.size();
    if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < keep) keep = p.top_k;
    auto by_logit = [&](std::int32_t a, std::int32_t b) {
        const float la = processed[static_cast<std::size_t>(a)];
        const float lb = processed[static_cast<std::size_t>(b)];
        return la != lb ? la > lb : a < b;
    };
    if (keep < order.size()) {
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep),
                          order.end(), by_logit);
        order.resize(keep);
    } else {
        std::sort(order.begin(), order.end(), by_logit);
    }
    // Probabilities of the top-k survivors (renormalized, as HF's softmax over masked scores).
    std::vector<double> probs(order.size());
    double total = 0.0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        probs[i] =
            std::exp(static_cast<double>(processed[static_cast<std::size_t>(order[i])]) - max);
        total += probs[i];
    }
    if (order.size() == processed.size()) total = sum;  // no top-k: the whole row's normalizer
    for (double& v : probs) v /= total;
    const bool filtered = order.size() < processed.size() || p.top_p < 1.0f || p.min_p > 0.0f;
    // top-p: the smallest prefix whose mass reaches top_p (at least one token).
    if (p.top_p < 1.0f) {
        double cum = 0.0;
        std::size_t n = 0;
        while (n < probs.size()) {
            cum += probs[n++];
            if (cum >= static_cast<double>(p.top_p)) break;
        }
        probs.resize(n);
        order.resize(n);
    }
    // min-p: drop tokens below min_p times the most likely one.
    if (p.min_p > 0.0f) {
        const double threshold = static_cast<double>(p.min_p) * probs.front();
        std::size_t n = 1;
        while (n < probs.size() && probs[n] >= threshold) ++n;
        probs.resize(n);
        order.resize(n);
    }
    // An unfiltered distribution's mass is 1 by definition (the sum of its probabilities
    // may differ in the last bits).
    double mass = filtered ? 0.0 : 1.0;
    if (filtered) {
        for (double v : probs) mass += v;
    }
    const double u = uniform_draw(p.seed, step) * mass;
    double cum = 0.0;
    result.token = order.back();
    for (std::size_t i = 0; i < probs.size(); ++i) {
        cum += probs[i];
        if (u < cum) {
            result.token = order[i];
            break;
        }
    }
    result.logprob = logprob_of(result.token);
    return result;
}

}  // namespace brigade::model
