#pragma once
// Whole-vocabulary passes over a row of logits for sampling (model/sampling.cpp): the largest
// logit, where it first occurs, and the softmax normalizer. A vocabulary of 150k entries makes
// these the bulk of a token's sampling time, so they run on SIMD (Highway, dynamic dispatch).

#include <cstdint>
#include <span>

namespace brigade::model {

struct LogitStats {
    float max = 0.0f;
    std::int64_t argmax = 0;  // first index holding `max` (ties to the lowest id, as torch)
    // Σ exp(x - max) over the row: float exponentials (about 1 ulp each) summed in blocks
    // into a double, so log(sum) is within ~1e-6 of an all-double computation.
    double sum_exp = 0.0;
};

// For a non-empty row; -inf entries (masked tokens) contribute nothing. NaN entries (a corrupt
// checkpoint) give meaningless sums but never an argmax outside the row.
LogitStats logit_stats(std::span<const float> x);

// out[b] = the largest of x[b * block, (b + 1) * block) (the last block may be shorter), for
// Sampler's selection of the first candidates. False if the row holds a NaN.
bool block_maxima(std::span<const float> x, std::int64_t block, float* out);

// Sampler's deep draws (sampling_deep.cpp): the candidates after the sorted prefix, each in
// a bucket of its logit, and the probability mass of each bucket.
struct CandidateBuckets {
    double max = 0.0;        // the row's largest logit
    double total = 1.0;      // the softmax normalizer relative to it
    double scale = 1.0;      // buckets per unit of logit below the max
    double min_prob = 0.0;   // > 0: candidates less likely than this go to `dropped`
    std::uint16_t last = 0;  // the bucket of everything further below
    std::uint16_t dropped = 0;
    std::uint16_t skip = 0;     // marks candidates of the sorted prefix
    float pivot_logit = 0.0f;   // the prefix's last candidate: it and those before it
    std::int32_t pivot_id = 0;  // (higher logits, equal ones with lower ids) are skipped
};
// For every i: bucket[i] = floor((max - x[i]) * scale) capped at `last`, `dropped` or `skip`;
// mass[bucket[i]] += exp(x[i] - max) / total (not for skipped ones; Highway's Exp, within 1 ulp
// of std::exp). `mass` has dropped + 1 entries. False if the row holds a NaN (nothing
// meaningful to bucket).
bool bucket_candidates(std::span<const float> x, const CandidateBuckets& spec,
                       std::uint16_t* bucket, double* mass);

}  // namespace brigade::model
