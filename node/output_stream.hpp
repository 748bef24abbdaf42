#pragma once
// The origin side of one request's output: the tokens the tail sampled (SampledTokenInfo) become
// text for the client — detokenized, run through `api::OutputProcessor` (stop strings,
// reasoning, tool calls), with logprobs, usage and timings. Wherever the tokens were computed,
// the client sees exactly what a single node would send.
//
// Not thread-safe: the caller serializes calls for one request.

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "api/completion_service.hpp"
#include "api/output_processor.hpp"
#include "mesh/messages.hpp"
#include "model/text/tokenizer.hpp"
#include "node/generation.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct OutputSetup {
    std::int64_t n_prompt = 0;
    bool logprobs = false;
    int top_logprobs = 0;
    api::OutputOptions output;
};

class OutputStream {
public:
    using Clock = std::chrono::steady_clock;

    OutputStream(const ModelFrontend& model, TokenTexts& texts,
                 std::shared_ptr<api::CompletionSink> sink, OutputSetup setup);

    // The head admitted the request: sends on_prompt (once; a resumed request is not
    // announced again) and starts the prefill clock.
    void on_accepted(std::int64_t cached_tokens);
    bool accepted() const { return accepted_; }

    enum class Outcome {
        running,   // more tokens to come
        finished,  // the pipeline ended it (stop token, length, JSON complete): final sent
        stopped,   // ended here (a stop string): final sent; the head must be told to stop
    };
    Outcome on_token(const mesh::SampledTokenInfo& token);

    // Ends with an error event (nothing more is sent).
    void fail(api::ServiceError error);
    bool done() const { return done_; }
    std::int64_t n_generated() const { return n_generated_; }
    // The hops of the pipeline the request runs on (its latest, after a resume), for the final's
    // timings.
    void set_hops(std::vector<api::Hop> hops) { hops_ = std::move(hops); }

private:
    void finish(api::Delta& delta, bool hit_length);
    void add_logprobs(const mesh::SampledTokenInfo& token, api::Delta& delta);

    const ModelFrontend& model_;
    TokenTexts& texts_;
    std::shared_ptr<api::CompletionSink> sink_;
    OutputSetup setup_;
    api::OutputProcessor processor_;
    model::text::StreamingDecoder decoder_;
    bool accepted_ = false;
    bool done_ = false;
    std::int64_t n_cached_ = 0;
    std::int64_t n_generated_ = 0;
    std::int64_t n_reasoning_ = 0;
    bool any_token_ = false;
    Clock::time_point t_start_, t_first_, t_last_;
    std::vector<api::Hop> hops_;
};

}  // namespace brigade::node
