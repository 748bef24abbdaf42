#include "api/completion_exchange.hpp"

#include <cstdio>
#include <string>
#include <utility>

#include "api/errors.hpp"
#include "api/sse.hpp"

namespace brigade::api {

using nlohmann::json;

namespace {

// " hops=a>b:0.21ms,b>a:?" for a request that crossed the network; "" when one node served it.
std::string hops_text(const std::vector<Hop>& hops) {
    if (hops.empty()) return "";
    std::string out = " hops=";
    char latency[32];
    for (std::size_t i = 0; i < hops.size(); ++i) {
        if (i > 0) out += ',';
        out += hops[i].from + '>' + hops[i].to + ':';
        if (hops[i].latency_ms < 0) {
            out += '?';
        } else {
            std::snprintf(latency, sizeof latency, "%.2fms", hops[i].latency_ms);
            out += latency;
        }
    }
    return out;
}

}  // namespace

CompletionExchange::CompletionExchange(const CompletionRequest& request, std::int64_t created_unix)
    : meta_{request.id, request.model, created_unix},
      endpoint_(request.endpoint),
      stream_(request.stream),
      include_usage_(request.stream && request.include_usage),
      logprobs_(request.logprobs) {}

ExchangeOutput CompletionExchange::handle(ServiceEvent event) {
    if (finished_) return {};  // a late event after an error or abandonment
    return std::visit(
        [this](auto&& e) -> ExchangeOutput {
            using T = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<T, PromptInfo>) {
                return on_prompt(e);
            } else if constexpr (std::is_same_v<T, PrefillProgress>) {
                return on_progress(e);
            } else if constexpr (std::is_same_v<T, Delta>) {
                return on_delta(std::move(e));
            } else if constexpr (std::is_same_v<T, Final>) {
                return on_final(std::move(e));
            } else {
                return on_error(e);
            }
        },
        std::move(event));
}

void CompletionExchange::open_stream(ExchangeOutput& out) {
    if (head_sent_ || !stream_) return;
    head_sent_ = true;
    out.head = ResponseHead{200, "text/event-stream", true};
    if (endpoint_ == Endpoint::chat_completions) {
        // OpenAI's first chunk announces the role with empty content.
        out.body += chunk_event({{"role", "assistant"}, {"content", ""}}, std::nullopt, {}, {});
    }
}

std::string CompletionExchange::chunk_event(json delta, std::optional<FinishReason> finish,
                                            std::vector<TokenLogprob> logprobs, std::string text) {
    json logprobs_json = nullptr;
    if (endpoint_ == Endpoint::chat_completions) {
        if (logprobs_ && !logprobs.empty()) logprobs_json = chat_logprobs_json(logprobs);
        return sse_event(dump_json(chat_chunk_json(meta_, std::move(delta), finish,
                                                   std::move(logprobs_json), include_usage_)));
    }
    if (logprobs_ && !logprobs.empty()) {
        logprobs_json = text_logprobs_json(logprobs, text_offset_);
    }
    text_offset_ += text.size();
    return sse_event(dump_json(
        text_chunk_json(meta_, std::move(text), finish, std::move(logprobs_json), include_usage_)));
}

ExchangeOutput CompletionExchange::on_prompt(const PromptInfo& info) {
    prompt_ = info;
    if (!info.model.empty()) meta_.model = info.model;
    ExchangeOutput out;
    open_stream(out);
    return out;
}

ExchangeOutput CompletionExchange::on_progress(const PrefillProgress& progress) {
    ExchangeOutput out;
    if (!stream_ || !head_sent_) return out;
    out.body = sse_comment("prompt " + std::to_string(progress.done_tokens) + "/" +
                           std::to_string(progress.total_tokens));
    return out;
}

ExchangeOutput CompletionExchange::on_delta(Delta delta) {
    ExchangeOutput out;
    if (!delta.tool_calls.empty()) saw_tool_calls_ = true;
    if (!stream_) {
        assembled_.add(delta);
        return out;
    }
    open_stream(out);
    if (logprobs_) {
        held_logprobs_.insert(held_logprobs_.end(), std::make_move_iterator(delta.logprobs.begin()),
                              std::make_move_iterator(delta.logprobs.end()));
    }
    const bool has_output =
        !delta.content.empty() || !delta.reasoning.empty() || !delta.tool_calls.empty();
    // Text held back by a stop matcher leaves logprobs without text: they ride on the next chunk.
    if (!has_output) return out;
    std::vector<TokenLogprob> logprobs = std::exchange(held_logprobs_, {});
    if (endpoint_ == Endpoint::chat_completions) {
        out.body += chunk_event(chat_delta_json(delta), std::nullopt, std::move(logprobs), {});
    } else {
        if (delta.content.empty()) return out;  // completions have no reasoning / tool calls
        out.body +=
            chunk_event(nullptr, std::nullopt, std::move(logprobs), std::move(delta.content));
    }
    return out;
}

ExchangeOutput CompletionExchange::on_final(Final final) {
    ExchangeOutput out;
    if (final.finish_reason == FinishReason::stop && saw_tool_calls_) {
        final.finish_reason = FinishReason::tool_calls;
    }
    if (final.usage.prompt_tokens == 0) final.usage.prompt_tokens = prompt_.prompt_tokens;
    if (final.usage.cached_tokens == 0) final.usage.cached_tokens = prompt_.cached_tokens;
    final_ = final;
    finished_ = true;
    out.finished = true;
    if (!stream_) {
        const json body = endpoint_ == Endpoint::chat_completions
                              ? chat_completion_json(meta_, assembled_, final.finish_reason,
                                                     final.usage, logprobs_)
                              : text_completion_json(meta_, assembled_, final.finish_reason,
                                                     final.usage, logprobs_);
        out.head = ResponseHead{200, "application/json", false};
        out.body = dump_json(body);
        head_sent_ = true;
        return out;
    }
    open_stream(out);
    std::vector<TokenLogprob> logprobs = std::exchange(held_logprobs_, {});
    if (endpoint_ == Endpoint::chat_completions) {
        out.body += chunk_event(json::object(), final.finish_reason, std::move(logprobs), {});
    } else {
        out.body += chunk_event(nullptr, final.finish_reason, std::move(logprobs), {});
    }
    if (include_usage_) {
        const std::string_view object =
            endpoint_ == Endpoint::chat_completions ? "chat.completion.chunk" : "text_completion";
        out.body += sse_event(dump_json(usage_chunk_json(meta_, object, final.usage)));
    }
    out.body += kSseDone;
    return out;
}

ExchangeOutput CompletionExchange::on_error(const ServiceError& error) {
    ExchangeOutput out;
    error_ = error;
    finished_ = true;
    out.finished = true;
    if (!head_sent_) {
        head_sent_ = true;
        out.head = ResponseHead{map_error(error.kind).status, "application/json", false};
        out.body = error_body(error, meta_.id);
        return out;
    }
    // Mid-stream: an error event (llama.cpp does the same; the OpenAI SDKs raise on it).
    out.body = sse_event(error_body(error, meta_.id));
    return out;
}

ExchangeOutput CompletionExchange::keepalive() {
    ExchangeOutput out;
    if (stream_ && head_sent_ && !finished_) out.body = sse_comment("keep-alive");
    return out;
}

void CompletionExchange::abandon(std::string_view reason) {
    if (finished_) return;
    finished_ = true;
    abandon_reason_ = reason;
}

std::string CompletionExchange::log_line(double wall_ms) const {
    char buffer[512];
    const char* endpoint = endpoint_ == Endpoint::chat_completions ? "chat" : "text";
    const std::string outcome =
        final_   ? "finish=" + std::string(finish_reason_name(final_->finish_reason))
        : error_ ? "error=" + std::string(error_kind_name(error_->kind))
        : !abandon_reason_.empty() ? "abandoned=" + abandon_reason_
                                   : std::string("unfinished");
    if (!final_) {
        std::snprintf(buffer, sizeof buffer,
                      "%s %s model=%s stream=%d prompt=%lld cached=%lld %s wall=%.0fms",
                      meta_.id.c_str(), endpoint, meta_.model.c_str(), stream_ ? 1 : 0,
                      static_cast<long long>(prompt_.prompt_tokens),
                      static_cast<long long>(prompt_.cached_tokens), outcome.c_str(), wall_ms);
        return buffer;
    }
    const Timings& t = final_->timings;
    const double prefill_tps = t.prefill_ms > 0 ? t.prefill_tokens * 1000.0 / t.prefill_ms : 0.0;
    const double decode_tps = t.decode_ms > 0 ? t.decode_tokens * 1000.0 / t.decode_ms : 0.0;
    std::snprintf(buffer, sizeof buffer,
                  "%s %s model=%s stream=%d prompt=%lld cached=%lld prefill=%.1fms (%.1f tok/s) "
                  "completion=%lld decode=%.1f tok/s %s wall=%.0fms",
                  meta_.id.c_str(), endpoint, meta_.model.c_str(), stream_ ? 1 : 0,
                  static_cast<long long>(final_->usage.prompt_tokens),
                  static_cast<long long>(final_->usage.cached_tokens), t.prefill_ms, prefill_tps,
                  static_cast<long long>(final_->usage.completion_tokens), decode_tps,
                  outcome.c_str(), wall_ms);
    return buffer + hops_text(t.hops);
}

}  // namespace brigade::api
