#include "node/output_stream.hpp"

#include <algorithm>
#include <cmath>

namespace brigade::node {
namespace {

// Special tokens whose text the output processor needs (tool calls, reasoning); every other
// special token (role markers, padding) is left out of the text, as `skip_special_tokens` does.
bool carries_structure(const std::string& token) {
    static constexpr const char* kKept[] = {"<tool_call>", "</tool_call>",   "[TOOL_CALLS]",
                                            "[ARGS]",      "<|python_tag|>", "<think>",
                                            "</think>"};
    return std::any_of(std::begin(kKept), std::end(kKept),
                       [&](const char* k) { return token == k; });
}

double ms_between(OutputStream::Clock::time_point a, OutputStream::Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

OutputStream::OutputStream(const ModelFrontend& model, TokenTexts& texts,
                           std::shared_ptr<api::CompletionSink> sink, OutputSetup setup)
    : model_(model),
      texts_(texts),
      sink_(std::move(sink)),
      setup_(std::move(setup)),
      processor_(setup_.output),
      decoder_(model.tokenizer, /*skip_special_tokens=*/false) {}

void OutputStream::on_accepted(std::int64_t cached_tokens) {
    if (accepted_ || done_) return;
    accepted_ = true;
    n_cached_ = cached_tokens;
    t_start_ = Clock::now();
    sink_->on_prompt({model_.info.id, setup_.n_prompt, n_cached_});
}

void OutputStream::fail(api::ServiceError error) {
    if (done_) return;
    done_ = true;
    sink_->on_error(std::move(error));
}

OutputStream::Outcome OutputStream::on_token(const mesh::SampledTokenInfo& t) {
    if (done_) return Outcome::finished;
    if (!accepted_) on_accepted(0);
    const auto now = Clock::now();
    if (!any_token_) t_first_ = now;
    any_token_ = true;
    t_last_ = now;
    api::Delta delta;
    if (t.token < 0) {  // ended without a token
        finish(delta, t.finish == mesh::TokenFinish::kLength);
        return Outcome::finished;
    }
    ++n_generated_;
    if (setup_.logprobs) add_logprobs(t, delta);
    const bool is_stop_id =
        std::find(model_.stop_ids.begin(), model_.stop_ids.end(), t.token) != model_.stop_ids.end();
    if (is_stop_id) {
        finish(delta, /*hit_length=*/false);
        return Outcome::finished;
    }
    if (processor_.in_reasoning()) ++n_reasoning_;
    std::string piece;
    if (!model_.tokenizer.is_special(t.token) ||
        carries_structure(model_.tokenizer.id_to_token(t.token))) {
        piece = decoder_.push(t.token);
    }
    const bool stopped = processor_.feed(piece, delta);
    if (stopped) {
        finish(delta, /*hit_length=*/false);
        return t.finish == mesh::TokenFinish::kContinue ? Outcome::stopped : Outcome::finished;
    }
    if (t.finish != mesh::TokenFinish::kContinue) {
        finish(delta, t.finish == mesh::TokenFinish::kLength);
        return Outcome::finished;
    }
    if (!delta.empty()) sink_->on_delta(std::move(delta));
    return Outcome::running;
}

void OutputStream::finish(api::Delta& delta, bool hit_length) {
    done_ = true;
    if (!processor_.stopped()) {
        const std::string rest = decoder_.finish();
        if (!rest.empty()) processor_.feed(rest, delta);
    }
    processor_.finish(delta);
    if (!delta.empty()) sink_->on_delta(std::move(delta));
    api::Final f;
    f.finish_reason = processor_.finish_reason(hit_length);
    f.usage.prompt_tokens = setup_.n_prompt;
    f.usage.completion_tokens = n_generated_;
    f.usage.cached_tokens = n_cached_;
    f.usage.reasoning_tokens = n_reasoning_;
    f.timings.prefill_tokens = setup_.n_prompt - n_cached_;
    f.timings.prefill_ms = any_token_ ? ms_between(t_start_, t_first_) : 0.0;
    f.timings.decode_tokens = std::max<std::int64_t>(0, n_generated_ - 1);
    f.timings.decode_ms = n_generated_ > 1 ? ms_between(t_first_, t_last_) : 0.0;
    f.timings.hops = hops_;
    sink_->on_final(f);
}

void OutputStream::add_logprobs(const mesh::SampledTokenInfo& t, api::Delta& delta) {
    api::TokenLogprob lp;
    lp.token = texts_.text(t.token);
    lp.logprob = t.logprob;
    lp.top_logprobs.reserve(t.top.size());
    for (const auto& top : t.top) {
        const double v = top.logprob;
        lp.top_logprobs.push_back({texts_.text(top.token), std::isfinite(v) ? v : -9999.0});
    }
    delta.logprobs.push_back(std::move(lp));
}

}  // namespace brigade::node
