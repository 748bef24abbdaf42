#pragma once
// Next-token selection from a row of logits (issue 2 "Sampling").
//
// Order of processing follows Hugging Face `generate`: repetition penalty (HF semantics over
// prompt + generated tokens), then presence/frequency penalties (OpenAI semantics over generated
// tokens), then temperature, then top-k, top-p and min-p filtering, then a draw.
//
// Randomness is portable and resumable: the uniform number for step t is a counter-based hash
// of (seed, t) — no hidden generator state — so a request can continue on another node given
// its parameters, seed, step count and token history, and produce the same tokens.

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/errors.hpp"

namespace brigade::model {

struct SamplingParams {
    float temperature = 0.0f;         // <= 0: greedy (argmax after penalties)
    int top_k = 0;                    // 0: off
    float top_p = 1.0f;               // 1: off
    float min_p = 0.0f;               // 0: off
    float repetition_penalty = 1.0f;  // 1: off (HF: positive logits / p, negative * p)
    float presence_penalty = 0.0f;    // OpenAI: -= p if the token was generated at all
    float frequency_penalty = 0.0f;   // OpenAI: -= p * count in generated tokens
    std::uint64_t seed = 0;

    bool greedy() const { return temperature <= 0.0f; }
};

// Checks ranges: temperature >= 0, top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1,
// repetition_penalty > 0, penalties within [-2, 2] (OpenAI's range).
Result<void> validate_sampling_params(const SamplingParams& p);

// The history a penalty looks at.
struct TokenHistory {
    std::span<const std::int32_t> prompt;
    std::span<const std::int32_t> generated;
};

// The uniform draw in [0, 1) for step `step` of a request seeded with `seed` (splitmix64 of
// both, 53 significant bits).
double uniform_draw(std::uint64_t seed, std::uint64_t step);

// Logits after penalties and temperature (not filtered): what a draw and logprobs are based on.
std::vector<float> process_logits(std::span<const float> logits, const SamplingParams& p,
                                  const TokenHistory& history);

// log_softmax of `x` (f64 accumulation).
std::vector<float> log_softmax(std::span<const float> x);

struct SampledToken {
    std::int32_t token = 0;
    float logprob = 0.0f;  // log_softmax(process_logits(...))[token]
};

// Picks the token of step `step` (0 = the first generated token): the token
// reference_sample_token picks, found without sorting the whole vocabulary (sampling at a
// temperature sorted all 150k candidates per token, ~25 ms, before this class) and without
// allocating once its buffers have grown: the first candidates are sorted, the rest bucketed
// by logit when the draw goes deeper. One per decode loop; not thread-safe.
class Backend;

class Sampler {
public:
    // `host`: the whole-row passes (the temperature, the block maxima, the normalizer) run in
    // chunks on its host threads (logit_math.hpp, row_chunk); the same token and logprob as
    // without. Not from inside one of its host tasks.
    SampledToken sample(std::span<const float> logits, const SamplingParams& p,
                        const TokenHistory& history, std::uint64_t step, Backend* host = nullptr);

    // The k most likely tokens of the row the last sample() drew from (after penalties and
    // temperature), best first, ties to the lower id, each with logit - log Z under that call's
    // normalizer (so the drawn token's entry is its logprob): an API request's top_logprobs.
    // Right after sample(), while its logits are alive (the row may be them). Found from the
    // row's block maxima as the draw's first candidates are, not by sorting the vocabulary.
    void most_likely(std::size_t k, std::vector<SampledToken>& out);

private:
    // The logits after penalties and temperature: `logits` itself when none applies.
    std::span<const float> processed(std::span<const float> logits, const SamplingParams& p,
                                     const TokenHistory& history, Backend* host);

    // Candidates within this much of the max logit are sorted first (the "head").
    static constexpr float kSortSpan = 20.0f;
    // How far the walk goes in sorted order before the rest is bucketed (sampling_deep.cpp):
    // the first sorted block. Each further block costs a selection pass over the head
    // (sampling_bench, flat 150k row at t=1, ms per token: handing over after 1024 sorted 6.7,
    // 256 4.1, 64 3.5; peaked rows, which mostly stop within 64, did not get slower).
    static constexpr std::size_t kDeepAfter = 64;

    // order_[0, k): the k first candidates (the smallest keys), sorted, found from the maxima
    // of 64-entry blocks of the row (block_max_, from logit_stats) without keying every
    // candidate. False where it does not apply: a NaN in the row, or fewer than 4k blocks (the
    // bound would then select most of the row anyway); the caller keys and partitions the
    // whole row instead.
    bool select_first(std::span<const float> x, std::size_t k, bool has_nan);

    // The walk where it hands over: order_[0, from) sorted and walked, `cum0` their
    // probabilities summed in order (filtered draws: probs_ holds them).
    struct DeepRest {
        std::span<const float> x;  // the processed logits
        double max = 0.0;          // their maximum
        double total = 0.0;        // the candidates' softmax normalizer (relative to max)
        std::size_t from = 0;
        double cum0 = 0.0;
        Backend* host = nullptr;  // runs the bucket pass in chunks (logit_math.hpp)
        double prob_of(std::int32_t id) const {
            return std::exp(static_cast<double>(x[static_cast<std::size_t>(id)]) - max) / total;
        }
    };
    struct Crossing {
        enum Kind { kFound, kNever, kUnsure } kind = kUnsure;
        std::int32_t id = 0;
        double cum = 0.0;  // the mass through the found candidate
    };
    // The rest's first candidate in sorted order whose cumulative mass passes `target`.
    Crossing deep_crossing(const DeepRest& rest, double target);
    // The token the walk would reach, or nothing where a decision is within rounding of its
    // threshold (the caller then sorts on).
    std::optional<std::int32_t> deep_draw(const DeepRest& rest, const SamplingParams& p, double u,
                                          double first_prob);

    // What most_likely needs of the last sample().
    std::span<const float> last_row_;
    double last_log_z_ = 0.0;
    bool last_has_nan_ = false;

    std::vector<float> processed_;
    std::vector<std::uint64_t> order_;           // candidates (logit, id keys), sorted lazily
    std::vector<float> block_max_, block_rank_;  // the blocks' maxima, and a copy to rank
    std::vector<std::int32_t> ids_;              // penalized history tokens
    std::vector<double> probs_;                  // the kept prefix's probabilities
    std::vector<double> deep_mass_;              // per logit bucket of the rest (deep draws)
    std::vector<double> deep_chunk_mass_;        // the same per chunk of the row
    std::vector<std::uint16_t> deep_bucket_;     // each candidate's bucket (by id)
    std::vector<std::int32_t> deep_members_;     // one bucket's candidates' ids
    std::vector<std::uint64_t> deep_keys_;       // the same as keys, sorted
};

// Sampler::sample with a fresh Sampler (allocates; for one-off calls).
SampledToken sample_token(std::span<const float> logits, const SamplingParams& p,
                          const TokenHistory& history, std::uint64_t step);

// The definition of sample_token: sorts every candidate and sums in double (model/
// sampling_reference.cpp). Sampler picks the same tokens; its logprobs agree to ~1e-6 (its
// normalizer is summed from float exponentials).
SampledToken reference_sample_token(std::span<const float> logits, const SamplingParams& p,
                                    const TokenHistory& history, std::uint64_t step);

}  // namespace brigade::model
