#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

namespace brigade::model {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

std::int32_t argmax(std::span<const float> x) {
    // First maximum, as torch.argmax: ties go to the lowest id.
    std::size_t best = 0;
    for (std::size_t i = 1; i < x.size(); ++i) {
        if (x[i] > x[best]) best = i;
    }
    return static_cast<std::int32_t>(best);
}

}  // namespace

Result<void> validate_sampling_params(const SamplingParams& p) {
    auto bad = [](const std::string& what) { return make_error(errc::invalid_argument, what); };
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
        return bad("temperature must be >= 0");
    }
    if (p.top_k < 0) return bad("top_k must be >= 0");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in (0, 1]");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1]");
    if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
        return bad("repetition_penalty must be > 0");
    }
    if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
        return bad("presence_penalty must be in [-2, 2]");
    }
    if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
        return bad("frequency_penalty must be in [-2, 2]");
    }
    return {};
}

double uniform_draw(std::uint64_t seed, std::uint64_t step) {
    const std::uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(~step));
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

std::vector<float> process_logits(std::span<const float> logits, const SamplingParams& p,
                                  const TokenHistory& history) {
    std::vector<float> out(logits.begin(), logits.end());
    const auto vocab = static_cast<std::int64_t>(out.size());
    auto in_vocab = [&](std::int32_t t) { return t >= 0 && t < vocab; };
    if (p.repetition_penalty != 1.0f) {
        // HF RepetitionPenaltyLogitsProcessor: each distinct token of prompt + output once.
        std::vector<bool> seen(out.size(), false);
        for (auto part : {history.prompt, history.generated}) {
            for (std::int32_t t : part) {
                if (!in_vocab(t) || seen[static_cast<std::size_t>(t)]) continue;
                seen[static_cast<std::size_t>(t)] = true;
                float& l = out[static_cast<std::size_t>(t)];
                l = l < 0.0f ? l * p.repetition_penalty : l / p.repetition_penalty;
            }
        }
    }
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        std::unordered_map<std::int32_t, int> counts;
        for (std::int32_t t : history.generated) {
            if (in_vocab(t)) ++counts[t];
        }
        for (const auto& [t, n] : counts) {
            out[static_cast<std::size_t>(t)] -=
                p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
        }
    }
    if (!p.greedy() && p.temperature != 1.0f) {
        for (float& l : out) l /= p.temperature;
    }
    return out;
}

std::vector<float> log_softmax(std::span<const float> x) {
    std::vector<float> out(x.size());
    if (x.empty()) return out;
    const float max = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float v : x) sum += std::exp(static_cast<double>(v) - max);
    const double log_z = static_cast<double>(max) + std::log(sum);
    for (std::size_t i = 0; i < x.size(); ++i) {
        out[i] = static_cast<float>(static_cast<double>(x[i]) - log_z);
    }
    return out;
}

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p,
                          const TokenHistory& history, std::uint64_t step) {
    const std::vector<float> processed = process_logits(logits, p, history);
    SampledToken result;
    if (processed.empty()) return result;
    const float max = *std::max_element(processed.begin(), processed.end());
    double sum = 0.0;
    for (float v : processed) sum += std::exp(static_cast<double>(v) - max);
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
    for (double& v : probs) v /= total;
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
    double mass = 0.0;
    for (double v : probs) mass += v;
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
