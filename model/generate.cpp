#include "model/generate.hpp"

#include <algorithm>
#include <string>

namespace brigade::model {

Result<GenerateResult> generate(Stage& stage, std::uint64_t seq_id,
                                std::span<const std::int32_t> prompt,
                                const GenerateOptions& options, const StepCallback& on_step) {
    if (!stage.is_head() || !stage.is_tail()) {
        return make_error(errc::invalid_argument, "generate needs a stage holding every layer");
    }
    if (prompt.empty()) return make_error(errc::invalid_argument, "the prompt is empty");
    if (options.max_new_tokens < 0 || options.prefill_chunk <= 0) {
        return make_error(errc::invalid_argument, "max_new_tokens and prefill_chunk must be >= 0");
    }
    if (auto r = validate_sampling_params(options.sampling); !r) return r.error();

    KvCache& kv = stage.kv_cache();
    const auto n_prompt = static_cast<std::int64_t>(prompt.size());
    // Reuse cached positions, but always run the last prompt token to get its logits.
    const std::int64_t reused = std::min(kv.length(seq_id), n_prompt - 1);
    if (auto r = kv.truncate(seq_id, reused); !r) return r.error();

    GenerateResult result;
    result.n_prompt_computed = n_prompt - reused;
    std::vector<float> logits;
    for (std::int64_t pos = reused; pos < n_prompt; pos += options.prefill_chunk) {
        const std::int64_t n = std::min<std::int64_t>(options.prefill_chunk, n_prompt - pos);
        SequenceBatchEntry e;
        e.seq_id = seq_id;
        e.pos0 = static_cast<std::int32_t>(pos);
        e.n_tokens = static_cast<std::int32_t>(n);
        e.tokens.assign(prompt.begin() + pos, prompt.begin() + pos + n);
        auto out = stage.run_layers({e});
        if (!out) return out.error();
        if (pos + n == n_prompt) {
            auto row = out->last_row(0, e);
            logits.assign(row.begin(), row.end());
        }
    }

    // Reused across steps, so that a decode step allocates nothing once they have grown.
    Sampler sampler;
    StageOutput out;
    std::vector<SequenceBatchEntry> batch(1);
    result.tokens.reserve(static_cast<std::size_t>(std::max(0, options.max_new_tokens)));
    for (int step = 0; step < options.max_new_tokens; ++step) {
        const TokenHistory history{prompt, result.tokens};
        const SampledToken t = sampler.sample(logits, options.sampling, history,
                                              static_cast<std::uint64_t>(step), &stage.backend());
        result.tokens.push_back(t.token);
        const bool is_stop = std::find(options.stop_ids.begin(), options.stop_ids.end(), t.token) !=
                             options.stop_ids.end();
        if (on_step) {
            GenerationStep s{step, t.token, t.logprob, logits, is_stop};
            if (!on_step(s)) {
                result.finish = FinishReason::kCancelled;
                return result;
            }
        }
        if (is_stop) {
            result.finish = FinishReason::kStop;
            return result;
        }
        if (step + 1 == options.max_new_tokens) break;
        SequenceBatchEntry& e = batch[0];
        e.seq_id = seq_id;
        e.pos0 = static_cast<std::int32_t>(kv.length(seq_id));
        e.n_tokens = 1;
        e.tokens.assign(1, t.token);
        if (auto r = stage.run_layers(batch, {}, out); !r) return r.error();
        auto row = out.last_row(0, e);
        logits.assign(row.begin(), row.end());
    }
    result.finish = FinishReason::kLength;
    return result;
}

}  // namespace brigade::model
