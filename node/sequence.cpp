#include "node/sequence.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

double ms_between(Sequence::Clock::time_point a, Sequence::Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Sequence::Sequence(Job job, PreparedPrompt prompt, model::SamplingParams sampling,
                   std::uint64_t seq_id, const ServeModel& model, TokenTexts& texts)
    : job_(std::move(job)),
      seq_id_(seq_id),
      model_(model),
      texts_(texts),
      sampling_(sampling),
      tokens_(std::move(prompt.tokens)),
      n_prompt_(static_cast<std::int64_t>(tokens_.size())),
      max_new_tokens_(prompt.max_new_tokens),
      processor_(std::move(prompt.output)),
      decoder_(model.tokenizer, /*skip_special_tokens=*/false) {
    if (job_.request.response_format == api::ResponseFormat::json_object) json_.emplace();
}

void Sequence::start() {
    t_start_ = Clock::now();
    job_.sink->on_prompt({model_.info.id, n_prompt_, n_cached_});
}

void Sequence::fail(api::ServiceError error) { job_.sink->on_error(std::move(error)); }

bool Sequence::on_logits(std::span<const float> logits) {
    const auto now = Clock::now();
    if (n_generated_ == 0) t_first_ = now;
    t_last_ = now;
    api::Delta delta;
    if (max_new_tokens_ <= 0) {
        finish(delta, /*hit_length=*/true);
        return true;
    }

    work_.assign(logits.begin(), logits.end());
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (const auto& [id, bias] : job_.request.sampling.logit_bias) {
        if (id >= 0 && static_cast<std::size_t>(id) < work_.size()) {
            work_[static_cast<std::size_t>(id)] += static_cast<float>(bias);
        }
    }
    if (json_) {
        // Only tokens whose text keeps the output a valid JSON-object prefix; stop tokens never
        // (generation ends by itself once the object closes).
        bool any = false;
        for (std::size_t id = 0; id < work_.size(); ++id) {
            if (work_[id] == kMasked) continue;
            const std::string& t = texts_.text(static_cast<std::int32_t>(id));
            auto probe = json_->clone();
            if (t.empty() || model_.tokenizer.is_special(static_cast<std::int32_t>(id)) ||
                !probe.feed(t)) {
                work_[id] = kMasked;
            } else {
                any = true;
            }
        }
        if (!any) {  // nothing can continue the object: end rather than emit invalid JSON
            finish(delta, /*hit_length=*/false);
            return true;
        }
    }

    const std::span<const std::int32_t> all(tokens_);
    const model::TokenHistory history{all.first(static_cast<std::size_t>(n_prompt_)),
                                      all.subspan(static_cast<std::size_t>(n_prompt_))};
    const auto sampled =
        model::sample_token(work_, sampling_, history, static_cast<std::uint64_t>(n_generated_));
    const std::int32_t token = sampled.token;
    tokens_.push_back(token);
    ++n_generated_;
    if (job_.request.logprobs) add_logprobs(work_, token, sampled.logprob, delta);

    const bool is_stop_id =
        std::find(model_.stop_ids.begin(), model_.stop_ids.end(), token) != model_.stop_ids.end();
    if (is_stop_id) {
        finish(delta, /*hit_length=*/false);
        return true;
    }
    if (processor_.in_reasoning()) ++n_reasoning_;
    std::string piece;
    if (!model_.tokenizer.is_special(token) ||
        carries_structure(model_.tokenizer.id_to_token(token))) {
        piece = decoder_.push(token);
    }
    if (json_) json_->feed(texts_.text(token));
    const bool stopped = processor_.feed(piece, delta);
    if (stopped || (json_ && json_->is_complete())) {
        finish(delta, /*hit_length=*/false);
        return true;
    }
    const bool out_of_room =
        n_generated_ >= max_new_tokens_ || n_prompt_ + n_generated_ >= model_.context;
    if (out_of_room) {
        finish(delta, /*hit_length=*/true);
        return true;
    }
    if (!delta.empty()) job_.sink->on_delta(std::move(delta));
    return false;
}

void Sequence::finish(api::Delta& delta, bool hit_length) {
    if (!processor_.stopped()) {
        const std::string rest = decoder_.finish();
        if (!rest.empty()) processor_.feed(rest, delta);
    }
    processor_.finish(delta);
    if (!delta.empty()) job_.sink->on_delta(std::move(delta));
    api::Final f;
    f.finish_reason = processor_.finish_reason(hit_length);
    f.usage.prompt_tokens = n_prompt_;
    f.usage.completion_tokens = n_generated_;
    f.usage.cached_tokens = n_cached_;
    f.usage.reasoning_tokens = n_reasoning_;
    f.timings.prefill_tokens = n_prompt_ - n_cached_;
    f.timings.prefill_ms =
        n_generated_ > 0 || max_new_tokens_ <= 0 ? ms_between(t_start_, t_first_) : 0.0;
    f.timings.decode_tokens = std::max<std::int64_t>(0, n_generated_ - 1);
    f.timings.decode_ms = n_generated_ > 1 ? ms_between(t_first_, t_last_) : 0.0;
    job_.sink->on_final(f);
}

void Sequence::add_logprobs(std::span<const float> logits, std::int32_t token, float logprob,
                            api::Delta& delta) {
    api::TokenLogprob lp;
    lp.token = texts_.text(token);
    lp.logprob = logprob;
    const int n_top = job_.request.top_logprobs;
    if (n_top > 0) {
        const std::span<const std::int32_t> all(tokens_);
        const model::TokenHistory history{
            all.first(static_cast<std::size_t>(n_prompt_)),
            all.subspan(static_cast<std::size_t>(n_prompt_), tokens_.size() - 1 - n_prompt_)};
        const auto lsm = model::log_softmax(model::process_logits(logits, sampling_, history));
        std::vector<std::int32_t> order(lsm.size());
        std::iota(order.begin(), order.end(), 0);
        const auto k = std::min<std::size_t>(static_cast<std::size_t>(n_top), order.size());
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k),
                          order.end(), [&](std::int32_t a, std::int32_t b) {
                              return lsm[static_cast<std::size_t>(a)] >
                                     lsm[static_cast<std::size_t>(b)];
                          });
        for (std::size_t i = 0; i < k; ++i) {
            const double v = lsm[static_cast<std::size_t>(order[i])];
            lp.top_logprobs.push_back({texts_.text(order[i]), std::isfinite(v) ? v : -9999.0});
        }
    }
    delta.logprobs.push_back(std::move(lp));
}

}  // namespace brigade::node
