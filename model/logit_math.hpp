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

}  // namespace brigade::model
