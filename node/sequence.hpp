#pragma once
// One request being generated on the compute thread: its tokens, sampler, detokenizer, output
// pipeline and JSON mask. The scheduler feeds it the logits of its last computed position;
// `on_logits` samples, turns the token into a delta for the sink and says whether it ended.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "api/completion_service.hpp"
#include "api/json_prefix.hpp"
#include "api/output_processor.hpp"
#include "model/sampling.hpp"
#include "model/text/tokenizer.hpp"
#include "node/generation.hpp"
#include "node/prompt_builder.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct Job {
    api::CompletionRequest request;
    std::shared_ptr<api::CompletionSink> sink;
    std::shared_ptr<api::Cancellation> cancel;
};

class Sequence {
public:
    using Clock = std::chrono::steady_clock;

    Sequence(Job job, PreparedPrompt prompt, model::SamplingParams sampling, std::uint64_t seq_id,
             const ServeModel& model, TokenTexts& texts);

    std::uint64_t seq_id() const { return seq_id_; }
    const Job& job() const { return job_; }
    // Prompt then generated tokens; positions [0, n_computed) are in the KV cache.
    const std::vector<std::int32_t>& tokens() const { return tokens_; }
    std::int64_t n_prompt() const { return n_prompt_; }
    std::int64_t n_computed() const { return n_computed_; }
    bool prefilling() const { return n_computed_ < n_prompt_; }

    // Positions reused from the prefix cache; reported in `on_prompt` by `start`.
    void set_cached(std::int64_t n) { n_cached_ = n_computed_ = n; }
    void start();  // on_prompt, prefill clock
    void advance(std::int64_t n) { n_computed_ += n; }

    // Logits of the last token of tokens(): samples the next one and reports it. Returns true
    // when the request is finished (its final event sent).
    bool on_logits(std::span<const float> logits);
    // Ends with an error event (engine failure, shutdown, cancellation).
    void fail(api::ServiceError error);

private:
    void finish(api::Delta& delta, bool hit_length);
    void add_logprobs(std::span<const float> logits, std::int32_t token, float logprob,
                      api::Delta& delta);

    Job job_;
    std::uint64_t seq_id_;
    const ServeModel& model_;
    TokenTexts& texts_;
    model::SamplingParams sampling_;
    std::vector<std::int32_t> tokens_;
    std::int64_t n_prompt_ = 0;
    std::int64_t n_computed_ = 0;
    std::int64_t n_cached_ = 0;
    std::int64_t max_new_tokens_ = 0;
    std::int64_t n_generated_ = 0;
    std::int64_t n_reasoning_ = 0;
    api::OutputProcessor processor_;
    model::text::StreamingDecoder decoder_;
    std::optional<api::JsonPrefixValidator> json_;
    std::vector<float> work_;  // masked/biased logits
    Clock::time_point t_start_, t_first_, t_last_;
};

}  // namespace brigade::node
