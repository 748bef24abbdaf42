#include "model/perplexity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace brigade::model {
namespace {

// Sequence ids far above what a server hands out, so scoring never touches another sequence's
// cache (the stage may be shared with other work).
constexpr std::uint64_t kFirstScoringSeqId = 0xFFFF'FF00'0000'0000ULL;

}  // namespace

double PerplexityResult::perplexity() const {
    if (n_scored == 0) return std::numeric_limits<double>::quiet_NaN();
    return std::exp(mean_nll());
}

double token_nll(std::span<const float> logits, std::int32_t target) {
    double max_logit = -std::numeric_limits<double>::infinity();
    for (float v : logits) max_logit = std::max(max_logit, static_cast<double>(v));
    double sum = 0.0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
    const double log_sum_exp = max_logit + std::log(sum);
    return log_sum_exp - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

Result<void> validate_perplexity_options(const PerplexityOptions& options,
                                         std::int64_t max_positions) {
    if (options.ctx < 2) {
        return make_error(errc::invalid_argument,
                          "perplexity: ctx must be at least 2 (one token of context, one scored); "
                          "got " +
                              std::to_string(options.ctx));
    }
    if (options.ctx > max_positions) {
        return make_error(errc::out_of_range, "perplexity: ctx " + std::to_string(options.ctx) +
                                                  " exceeds the model's context limit of " +
                                                  std::to_string(max_positions) + " positions");
    }
    if (options.stride < 0 || options.stride > options.ctx) {
        return make_error(errc::invalid_argument, "perplexity: stride must be between 1 and ctx (" +
                                                      std::to_string(options.ctx) +
                                                      "), or 0 for ctx; got " +
                                                      std::to_string(options.stride));
    }
    if (options.max_windows < 0) {
        return make_error(errc::invalid_argument, "perplexity: max_windows must be >= 0");
    }
    if (options.step_tokens < 0) {
        return make_error(errc::invalid_argument, "perplexity: step_tokens must be >= 0");
    }
    return {};
}

std::int64_t perplexity_window_count(std::int64_t n_tokens, const PerplexityOptions& options) {
    if (n_tokens < 2 || options.ctx < 2) return 0;
    const std::int64_t ctx = options.ctx;
    const std::int64_t stride = options.stride == 0 ? ctx : options.stride;
    std::int64_t n;
    if (stride == ctx) {
        // Disjoint windows; a trailing one-token window is dropped.
        n = n_tokens / ctx + (n_tokens % ctx >= 2 ? 1 : 0);
    } else {
        // Windows start at 0, stride, ... until one reaches the end.
        const std::int64_t last_start =
            n_tokens <= ctx ? 0 : (n_tokens - ctx + stride - 1) / stride * stride;
        n = last_start / stride + 1;
    }
    return options.max_windows > 0 ? std::min(n, options.max_windows) : n;
}

Result<PerplexityResult> compute_perplexity(Stage& stage, std::span<const std::int32_t> ids,
                                            const PerplexityOptions& options,
                                            const PerplexityProgress& progress) {
    if (!stage.is_head() || !stage.is_tail()) {
        return make_error(errc::invalid_argument,
                          "perplexity needs a stage holding every layer of the model");
    }
    const std::int64_t max_positions = stage.kv_cache().limits().max_positions;
    if (auto r = validate_perplexity_options(options, max_positions); !r) return r.error();
    const auto n = static_cast<std::int64_t>(ids.size());
    if (n < 2) {
        return make_error(errc::invalid_argument,
                          "perplexity: the text has " + std::to_string(n) +
                              " token(s); at least 2 are needed to score one");
    }
    const std::int64_t ctx = options.ctx;
    const std::int64_t stride = options.stride == 0 ? ctx : options.stride;

    PerplexityResult result;
    // `scored_until`: every token before this index has been scored by an earlier window (or is
    // token 0, which nothing can score).
    std::int64_t scored_until = 1;
    // A window must hold at least 2 tokens; a trailing single token is left unscored, as the
    // reference definition drops such a window.
    for (std::int64_t start = 0; start + 1 < n && scored_until < n; start += stride) {
        if (options.max_windows > 0 && result.n_windows >= options.max_windows) break;
        const std::int64_t end = std::min(start + ctx, n);
        // Tokens [first, end) are scored: those no earlier window scored, never a window's first.
        const std::int64_t first = std::max(start + 1, scored_until);
        if (first >= end) break;  // cannot happen (scored_until < n, end >= start + 2)

        const std::uint64_t seq_id =
            kFirstScoringSeqId + static_cast<std::uint64_t>(result.n_windows);
        const std::int64_t step = options.step_tokens > 0 ? options.step_tokens : end - start;
        stage.kv_cache().release(seq_id);  // an empty cache, whatever happened before
        double window_nll = 0.0;
        for (std::int64_t s0 = start; s0 < end; s0 += step) {
            const std::int64_t s1 = std::min(end, s0 + step);
            SequenceBatchEntry e;
            e.seq_id = seq_id;
            e.pos0 = static_cast<std::int32_t>(s0 - start);
            e.n_tokens = static_cast<std::int32_t>(s1 - s0);
            e.tokens.assign(ids.begin() + s0, ids.begin() + s1);
            e.all_logits = true;
            const auto t0 = std::chrono::steady_clock::now();
            auto out = stage.run_layers({e});
            if (!out) {
                stage.kv_cache().release(seq_id);
                return out.error();
            }
            result.seconds +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            // Row r of this step predicts token s0 + r + 1.
            for (std::int64_t target = std::max(first, s0 + 1); target <= s1 && target < end;
                 ++target) {
                const auto row = out->row(out->logits_row0[0] + (target - 1 - s0));
                window_nll += token_nll(row, ids[static_cast<std::size_t>(target)]);
            }
        }
        stage.kv_cache().release(seq_id);
        if (result.n_windows == 0) result.first_window_nll = window_nll;
        result.total_nll += window_nll;
        result.n_scored += end - first;
        result.n_evaluated += end - start;
        result.n_windows += 1;
        scored_until = end;
        if (progress && !progress(result)) break;
    }
    return result;
}

}  // namespace brigade::model
