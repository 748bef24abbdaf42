#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "model/logit_math.hpp"
#include "model/sampling_keys.hpp"

namespace brigade::model {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Penalties, then temperature, applied in place to a row of logits (process_logits and
// Sampler share it). `ids` is scratch for the history's token ids, so a reused one makes this
// allocation-free.
void apply_processing(std::vector<float>& out, const SamplingParams& p, const TokenHistory& history,
                      std::vector<std::int32_t>& ids) {
    const auto vocab = static_cast<std::int32_t>(out.size());
    auto in_vocab = [&](std::int32_t t) { return t >= 0 && t < vocab; };
    if (p.repetition_penalty != 1.0f) {
        // HF RepetitionPenaltyLogitsProcessor: each distinct token of prompt + output once.
        ids.clear();
        for (auto part : {history.prompt, history.generated}) {
            for (std::int32_t t : part) {
                if (in_vocab(t)) ids.push_back(t);
            }
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        for (std::int32_t t : ids) {
            float& l = out[static_cast<std::size_t>(t)];
            l = l < 0.0f ? l * p.repetition_penalty : l / p.repetition_penalty;
        }
    }
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        // OpenAI: presence once per generated token id, frequency per occurrence.
        ids.clear();
        for (std::int32_t t : history.generated) {
            if (in_vocab(t)) ids.push_back(t);
        }
        std::sort(ids.begin(), ids.end());
        for (std::size_t i = 0; i < ids.size();) {
            std::size_t j = i;
            while (j < ids.size() && ids[j] == ids[i]) ++j;
            out[static_cast<std::size_t>(ids[i])] -=
                p.presence_penalty + p.frequency_penalty * static_cast<float>(j - i);
            i = j;
        }
    }
    if (!p.greedy() && p.temperature != 1.0f) {
        for (float& l : out) l /= p.temperature;
    }
}

bool has_penalties(const SamplingParams& p) {
    return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
           p.frequency_penalty != 0.0f;
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
    std::vector<std::int32_t> ids;
    apply_processing(out, p, history, ids);
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

std::span<const float> Sampler::processed(std::span<const float> logits, const SamplingParams& p,
                                          const TokenHistory& history, Backend* host) {
    const bool penalties = has_penalties(p);
    const bool temperature = !p.greedy() && p.temperature != 1.0f;
    if (!penalties && !temperature) return logits;
    processed_.resize(logits.size());
    const auto n = static_cast<std::int64_t>(logits.size());
    if (!penalties) {
        // The common case in one chunked pass: copy and divide (the same division as
        // apply_processing's, so the same floats).
        for_each_row_chunk(host, n, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t i = begin; i < end; ++i) {
                processed_[static_cast<std::size_t>(i)] =
                    logits[static_cast<std::size_t>(i)] / p.temperature;
            }
        });
        return processed_;
    }
    // Penalties change a few entries, before the temperature divides them all: copy, penalize,
    // divide.
    for_each_row_chunk(host, n, [&](std::int64_t begin, std::int64_t end) {
        std::copy(logits.begin() + begin, logits.begin() + end, processed_.begin() + begin);
    });
    SamplingParams penalties_only = p;
    penalties_only.temperature = 1.0f;
    apply_processing(processed_, penalties_only, history, ids_);
    if (temperature) {
        for_each_row_chunk(host, n, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t i = begin; i < end; ++i) {
                processed_[static_cast<std::size_t>(i)] /= p.temperature;
            }
        });
    }
    return processed_;
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingParams& p,
                             const TokenHistory& history, std::uint64_t step, Backend* host) {
    SampledToken result;
    last_row_ = {};
    if (logits.empty()) return result;
    const std::span<const float> x = processed(logits, p, history, host);
    const LogitStats stats = logit_stats(x, host, &block_max_);
    const double max = stats.max;
    const double log_z = max + std::log(stats.sum_exp);
    last_row_ = x;
    last_log_z_ = log_z;
    last_has_nan_ = stats.has_nan;
    auto logit = [&](std::int32_t t) {
        return static_cast<double>(x[static_cast<std::size_t>(t)]);
    };
    if (p.greedy()) {
        result.token = static_cast<std::int32_t>(stats.argmax);
        result.logprob = static_cast<float>(logit(result.token) - log_z);
        return result;
    }

    // Candidates by descending logit, ties by ascending id (the reference's order), sorted
    // only as far as the draw needs. Those within kSortSpan of the max are moved to the front
    // (the "head"); the rest are each under e^-20 of the top token's probability. Both parts
    // are sorted lazily, in blocks that double, as the walks below reach them: the draw
    // usually stops within the first few dozen tokens, and sorting all 150k took ~25 ms.
    const std::size_t n = x.size();
    std::size_t n_candidates = n;
    std::size_t sorted = 0;  // order_[0, sorted) is in final order and precedes the rest
    std::size_t head = n;    // with every candidate keyed: order_[0, head) are the head's
    bool all_keyed = false;
    auto key_all = [&] {
        order_.resize(n);
        for (std::size_t i = 0; i < n; ++i) {  // branch-free: vectorized by the compiler
            order_[i] = candidate_key(x[i], static_cast<std::int32_t>(i));
        }
        // Keys below this one have a logit >= max - kSortSpan.
        const std::uint64_t near_end = (candidate_key(stats.max - kSortSpan, 0) | 0xFFFFFFFFu) + 1;
        head = static_cast<std::size_t>(
            std::partition(order_.begin(), order_.end(),
                           [near_end](std::uint64_t k) { return k < near_end; }) -
            order_.begin());
        sorted = 0;
        all_keyed = true;
    };
    const auto at = [&](std::size_t i) { return order_.begin() + static_cast<std::ptrdiff_t>(i); };
    if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < n) {
        // Top-k survivors, sorted: selected as below, or keyed and partially sorted (from the
        // head alone when it holds k of them) where k is too large for that.
        n_candidates = static_cast<std::size_t>(p.top_k);
        if (!select_first(x, n_candidates, stats.has_nan)) {
            key_all();
            std::partial_sort(at(0), at(n_candidates), at(head >= n_candidates ? head : n));
        }
        sorted = n_candidates;
    } else if (select_first(x, kDeepAfter, stats.has_nan)) {
        // The walk's first block, without keying the whole row: most draws end in it, and
        // keying, partitioning and selecting over 150k candidates took most of a draw.
        sorted = kDeepAfter;
    } else {
        key_all();
    }
    auto sort_through = [&](std::size_t i) {  // makes order_[i] final
        if (i < sorted) return;
        // Past the selected first block: every candidate keyed, and the block sorted again
        // from them (keys are unique, so in the same order).
        if (!all_keyed) key_all();
        // Every head entry precedes every tail entry, so each part is selected on its own.
        const std::size_t part_end = i < head ? head : n_candidates;
        const std::size_t target = std::min(part_end, std::max(i + 1, 2 * sorted + 64));
        if (target < part_end) std::nth_element(at(sorted), at(target), at(part_end));
        std::sort(at(sorted), at(target));
        sorted = target;
    };
    // The reference normalizes over the candidates: top-k's renormalized softmax, or the
    // whole row (whose sum logit_stats already has).
    double total = stats.sum_exp;
    if (n_candidates < n) {
        total = 0.0;
        for (std::size_t i = 0; i < n_candidates; ++i)
            total += std::exp(logit(candidate_id(order_[i])) - max);
    }
    auto prob = [&](std::size_t i) {
        return std::exp(logit(candidate_id(order_[i])) - max) / total;
    };

    const double u = uniform_draw(p.seed, step);
    auto drawn = [&](std::int32_t token) {
        result.token = token;
        result.logprob = static_cast<float>(logit(token) - log_z);
        return result;
    };
    if (n_candidates == n && p.top_p >= 1.0f && p.min_p <= 0.0f) {
        // Nothing filtered: the kept mass is 1, and the walk stops where the draw falls.
        double cum = 0.0;
        for (std::size_t i = 0; i < n; ++i) {
            if (i == kDeepAfter) {
                if (const auto t = deep_draw({x, max, total, i, cum, host}, p, u, 0.0))
                    return drawn(*t);
            }
            sort_through(i);
            cum += prob(i);
            if (u < cum) return drawn(candidate_id(order_[i]));
        }
        sort_through(n - 1);
        return drawn(candidate_id(order_[n - 1]));  // rounding left the draw past the last one
    }
    // Top-p keeps the shortest prefix whose mass reaches top_p, min-p the prefix of tokens at
    // least min_p times as likely as the first; the draw is over the shorter of the two.
    probs_.clear();
    sort_through(0);
    const double min_prob = static_cast<double>(p.min_p) * prob(0);
    double cum = 0.0;
    for (std::size_t i = 0; i < n_candidates; ++i) {
        if (i == kDeepAfter && n_candidates == n) {
            if (const auto t = deep_draw({x, max, total, i, cum, host}, p, u, prob(0)))
                return drawn(*t);
        }
        sort_through(i);
        const double pi = prob(i);
        if (i > 0 && p.min_p > 0.0f && pi < min_prob) break;
        probs_.push_back(pi);
        cum += pi;
        if (p.top_p < 1.0f && cum >= static_cast<double>(p.top_p)) break;
    }
    double mass = 0.0;
    for (double v : probs_) mass += v;
    const double target = u * mass;
    cum = 0.0;
    for (std::size_t i = 0; i < probs_.size(); ++i) {
        cum += probs_[i];
        if (target < cum) return drawn(candidate_id(order_[i]));
    }
    return drawn(candidate_id(order_[probs_.size() - 1]));
}

void Sampler::most_likely(std::size_t k, std::vector<SampledToken>& out) {
    out.clear();
    const std::span<const float> x = last_row_;
    k = std::min(k, x.size());
    if (k == 0) return;
    if (!select_first(x, k, last_has_nan_)) {
        // Short rows and NaN rows: every candidate keyed (the same order).
        order_.resize(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
            order_[i] = candidate_key(x[i], static_cast<std::int32_t>(i));
        }
        const auto last = order_.begin() + static_cast<std::ptrdiff_t>(k);
        std::partial_sort(order_.begin(), last, order_.end());
    }
    for (std::size_t i = 0; i < k; ++i) {
        const std::int32_t id = candidate_id(order_[i]);
        const double logit = x[static_cast<std::size_t>(id)];
        out.push_back({id, static_cast<float>(logit - last_log_z_)});
    }
}

bool Sampler::select_first(std::span<const float> x, std::size_t k, bool has_nan) {
    // The k largest block maxima are k distinct entries, so the k-th largest of them (`bound`)
    // is at most the k-th largest logit: every one of the first k candidates is >= bound and
    // sits in a block whose maximum is >= bound, and those blocks hold at least k such entries.
    // On a 150k row that is a few thousand entries to look at instead of all of them.
    constexpr auto kBlock = static_cast<std::size_t>(kLogitBlock);
    const std::size_t n = x.size();
    const std::size_t n_blocks = block_max_.size();
    if (has_nan || k == 0 || n_blocks < 4 * k) return false;
    order_.reserve(n);  // what key_all needs, so that a later fallback does not allocate
    block_rank_.assign(block_max_.begin(), block_max_.end());
    const auto kth = block_rank_.begin() + static_cast<std::ptrdiff_t>(k - 1);
    std::nth_element(block_rank_.begin(), kth, block_rank_.end(), std::greater<float>());
    const float bound = *kth;
    order_.clear();
    for (std::size_t b = 0; b < n_blocks; ++b) {
        if (!(block_max_[b] >= bound)) continue;
        const std::size_t end = std::min(n, (b + 1) * kBlock);
        for (std::size_t i = b * kBlock; i < end; ++i) {
            if (x[i] >= bound) order_.push_back(candidate_key(x[i], static_cast<std::int32_t>(i)));
        }
    }
    if (order_.size() < k) return false;  // cannot happen (see above); the full path is exact
    const auto last = order_.begin() + static_cast<std::ptrdiff_t>(k);
    std::nth_element(order_.begin(), last - 1, order_.end());
    std::sort(order_.begin(), last);
    return true;
}

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p,
                          const TokenHistory& history, std::uint64_t step) {
    Sampler sampler;
    return sampler.sample(logits, p, history, step);
}
}  // namespace brigade::model
