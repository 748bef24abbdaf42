#pragma once
// Perplexity of a model over a sequence of token ids (issue 4), computed with the engine.
//
// Definition (the one model/demo/reference.json states, and what PyTorch computed for the demo
// model): split the ids into windows of `ctx` tokens; run each window alone from position 0 with
// an empty cache and nothing prepended; score each token of a window by the log-softmax at the
// previous position, so a window's first token is never scored; perplexity = exp(total NLL /
// scored tokens).
//
// With the default `stride` (= ctx) windows do not overlap and every token except the first of
// each window is scored once. A smaller stride gives the Hugging Face "sliding window" variant:
// windows start every `stride` tokens and score only the tokens no earlier window scored, so
// most tokens are predicted with at least ctx - stride tokens of context.

#include <cstdint>
#include <functional>
#include <span>

#include "model/errors.hpp"
#include "model/forward.hpp"

namespace brigade::model {

struct PerplexityOptions {
    int ctx = 256;   // tokens per window: 2 .. the model's max_position_embeddings
    int stride = 0;  // 0 = ctx (non-overlapping windows); else 1 .. ctx
    // Stop after this many windows (0 = all): a quick estimate over the start of a text.
    std::int64_t max_windows = 0;
    // Run each window through the model this many tokens at a time, as decode does (0 = the
    // whole window in one pass, as prompt processing does). The scores are the same up to
    // kernel rounding; 1-4 exercises the decode kernels (e.g. int8 activations, which only
    // decode uses).
    int step_tokens = 0;
};

struct PerplexityResult {
    double total_nll = 0.0;         // sum of -log p(token | previous tokens of its window)
    std::int64_t n_scored = 0;      // tokens scored
    std::int64_t n_windows = 0;     // windows run
    std::int64_t n_evaluated = 0;   // tokens run through the model (scored or context)
    double first_window_nll = 0.0;  // total NLL of window 0 (a quick cross-check)
    double seconds = 0.0;           // wall time of the forward passes

    double mean_nll() const { return n_scored > 0 ? total_nll / static_cast<double>(n_scored) : 0; }
    double perplexity() const;
    // Tokens run through the model per second.
    double tokens_per_second() const {
        return seconds > 0 ? static_cast<double>(n_evaluated) / seconds : 0.0;
    }
};

// Called after each window with the running result; returning false stops early (the result
// so far is returned).
using PerplexityProgress = std::function<bool(const PerplexityResult&)>;

// Checks `options` against a model whose context limit is `max_positions`.
Result<void> validate_perplexity_options(const PerplexityOptions& options,
                                         std::int64_t max_positions);

// How many windows `compute_perplexity` runs over `n_tokens` tokens (options assumed valid),
// for progress reports.
std::int64_t perplexity_window_count(std::int64_t n_tokens, const PerplexityOptions& options);

// Scores `ids` with `stage`, which must hold the whole model (head and tail). Uses sequence ids
// of the stage's KV cache that no one else uses and releases them again.
Result<PerplexityResult> compute_perplexity(Stage& stage, std::span<const std::int32_t> ids,
                                            const PerplexityOptions& options,
                                            const PerplexityProgress& progress = {});

// -log softmax(logits)[target], accumulated in double (exact enough for a sum over ~1e5 tokens).
double token_nll(std::span<const float> logits, std::int32_t target);

}  // namespace brigade::model
