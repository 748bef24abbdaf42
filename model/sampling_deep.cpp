// Sampler's deep draws: when the walk in sorted order has passed kDeepAfter candidates without
// being decided, the rest is bucketed by logit instead of sorted further.
//
// Why: with a nearly flat distribution the walk goes tens of thousands of candidates deep
// (top-p 0.9 over a flat row keeps most of the vocabulary), and sorting that far cost 5-12 ms
// per token on a 150k vocabulary, more than a whole decode step of a small model. Here the rest
// costs one SIMD pass (a probability and a bucket per candidate, logit_math.cpp), and only the
// bucket where a decision falls is sorted.
//
// Exactness: the reference sums probabilities in sorted order; the buckets sum them in another
// order, from an exponential within an ulp of the reference's, so every cumulative mass here is
// within about 2n * 2^-53 (< 3e-10 for a million candidates) of the reference's. Every decision
// (top-p's cutoff, the draw's crossing) is taken only when the masses on both sides of it are more
// than kMargin away from the threshold, where both orders must agree; otherwise the caller goes on
// sorting, exactly as before.

#include <algorithm>
#include <cmath>

#include "model/logit_math.hpp"
#include "model/sampling.hpp"
#include "model/sampling_keys.hpp"

namespace brigade::model {
namespace {

constexpr int kBuckets = 4096;                // over the sorted head's span of logits
constexpr std::uint16_t kDropped = kBuckets;  // the bucket of candidates min-p removes
constexpr std::uint16_t kSkipped = 0xFFFF;    // candidates of the sorted prefix
constexpr double kMargin = 1e-9;  // far above the summation-order difference (see above)

}  // namespace

Sampler::Crossing Sampler::deep_crossing(const DeepRest& rest, double target) {
    // The first bucket whose end passes the target, then its members in sorted order.
    double c = rest.cum0;
    int b = 0;
    while (b < kBuckets && c + deep_mass_[static_cast<std::size_t>(b)] <= target) {
        c += deep_mass_[static_cast<std::size_t>(b)];
        ++b;
    }
    if (b == kBuckets) return {c < target - kMargin ? Crossing::kNever : Crossing::kUnsure};
    if (target - c < kMargin || c + deep_mass_[static_cast<std::size_t>(b)] - target < kMargin) {
        return {Crossing::kUnsure};
    }
    deep_members_.resize(deep_bucket_.size());
    const std::int64_t n_members = bucket_members(deep_bucket_, static_cast<std::uint16_t>(b),
                                                  deep_members_.data(), rest.host);
    deep_keys_.clear();
    for (std::int64_t m = 0; m < n_members; ++m) {
        const std::int32_t id = deep_members_[static_cast<std::size_t>(m)];
        deep_keys_.push_back(candidate_key(rest.x[static_cast<std::size_t>(id)], id));
    }
    std::sort(deep_keys_.begin(), deep_keys_.end());
    for (const std::uint64_t key : deep_keys_) {
        const double before = c;
        c += rest.prob_of(candidate_id(key));
        if (c > target) {
            if (c - target < kMargin || target - before < kMargin) return {Crossing::kUnsure};
            return {Crossing::kFound, candidate_id(key), c};
        }
    }
    return {Crossing::kUnsure};  // the bucket's sum and its members' disagreed by rounding
}

std::optional<std::int32_t> Sampler::deep_draw(const DeepRest& rest, const SamplingParams& p,
                                               double u, double first_prob) {
    const bool top_p = p.top_p < 1.0f;
    const bool min_p = p.min_p > 0.0f;
    const double min_prob = min_p ? static_cast<double>(p.min_p) * first_prob : 0.0;
    if (!std::isfinite(rest.max)) return std::nullopt;
    // Every candidate after the sorted prefix into its bucket, in one SIMD pass over the row
    // (Highway's exponential is within an ulp of std::exp: far inside the margin, and the walk
    // inside a bucket recomputes each probability as the reference does).
    const std::uint64_t pivot = order_[rest.from - 1];
    CandidateBuckets spec;
    spec.max = rest.max;
    spec.total = rest.total;
    spec.scale = kBuckets / static_cast<double>(kSortSpan);
    spec.min_prob = min_prob;
    spec.last = kBuckets - 1;
    spec.dropped = kDropped;
    spec.skip = kSkipped;
    spec.pivot_id = candidate_id(pivot);
    spec.pivot_logit = rest.x[static_cast<std::size_t>(spec.pivot_id)];
    deep_bucket_.resize(rest.x.size());
    deep_mass_.assign(kBuckets + 1, 0.0);
    // Room for any bucket but a pathological one up front, so that later draws do not allocate
    // (a bucket holds ~n / 4096 candidates of a flat row; all of them only if all tie).
    deep_keys_.reserve(std::min<std::size_t>(rest.x.size(), 16384));
    if (!bucket_candidates(rest.x, spec, deep_bucket_.data(), deep_mass_.data(), rest.host,
                           deep_chunk_mass_)) {
        return std::nullopt;  // NaN logits (a corrupt checkpoint): sort instead
    }
    if (!top_p && !min_p) {
        const Crossing at = deep_crossing(rest, u);  // the unfiltered mass is 1 by definition
        return at.kind == Crossing::kFound ? std::optional(at.id) : std::nullopt;
    }

    // The kept mass: through top-p's cutoff, or every candidate min-p keeps.
    double kept = rest.cum0;
    for (int b = 0; b < kBuckets; ++b) kept += deep_mass_[static_cast<std::size_t>(b)];
    double mass = kept;
    if (top_p) {
        const Crossing cut = deep_crossing(rest, static_cast<double>(p.top_p));
        if (cut.kind == Crossing::kUnsure) return std::nullopt;
        if (cut.kind == Crossing::kFound) mass = cut.cum;
    }
    const double target = u * mass;
    if (target > mass - kMargin) return std::nullopt;  // at the kept prefix's very end
    if (target > rest.cum0 + kMargin) {
        const Crossing at = deep_crossing(rest, target);
        return at.kind == Crossing::kFound ? std::optional(at.id) : std::nullopt;
    }
    if (target > rest.cum0 - kMargin) return std::nullopt;
    // In the sorted prefix: the reference's walk over it, summed as it sums.
    double c = 0.0;
    for (std::size_t i = 0; i < probs_.size(); ++i) {
        const double before = c;
        c += probs_[i];
        if (target < c) {
            if (c - target < kMargin || target - before < kMargin) return std::nullopt;
            return candidate_id(order_[i]);
        }
    }
    return std::nullopt;
}

}  // namespace brigade::model
