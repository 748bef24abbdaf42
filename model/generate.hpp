#pragma once
// A single-node generation loop over a `Stage` that holds the whole model (head and tail):
// chunked prefill, then one decode step per token with the KV cache. Used by `brigade run`
// and by tests; the server batches many sequences through `Stage::run_layers` itself.

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/errors.hpp"
#include "model/forward.hpp"
#include "model/sampling.hpp"

namespace brigade::model {

struct GenerateOptions {
    int max_new_tokens = 32;
    SamplingParams sampling;
    // Generation ends after emitting one of these ids (it is reported and counted).
    std::vector<std::int32_t> stop_ids;
    // Prompt tokens per forward call during prefill.
    int prefill_chunk = 512;
};

struct GenerationStep {
    std::int64_t index = 0;  // 0 = first generated token
    std::int32_t token = 0;
    float logprob = 0.0f;
    std::span<const float> logits;  // raw logits the token was chosen from [vocab]
    bool is_stop = false;
};

enum class FinishReason { kStop, kLength, kCancelled };

struct GenerateResult {
    std::vector<std::int32_t> tokens;
    FinishReason finish = FinishReason::kLength;
    std::int64_t n_prompt_computed = 0;  // prompt tokens actually run (after cache reuse)
};

// Called for every generated token; returning false stops generation (kCancelled).
using StepCallback = std::function<bool(const GenerationStep&)>;

// Generates a continuation of `prompt` for `seq_id`. If the stage's KV cache already holds
// positions of `seq_id`, the caller asserts that they equal the first positions of `prompt`
// and only the rest is computed (prefix reuse); at least the last prompt token is always run.
Result<GenerateResult> generate(Stage& stage, std::uint64_t seq_id,
                                std::span<const std::int32_t> prompt,
                                const GenerateOptions& options, const StepCallback& on_step = {});

}  // namespace brigade::model
