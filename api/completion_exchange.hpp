#pragma once
// One completion request seen from the HTTP side, as a sans-io state machine (house guide §1.2):
// service events in, bytes to write out. The Beast driver (http_server.cpp) only moves these
// bytes; everything about the response format lives here and is unit-tested without sockets.
//
// Streaming: the response head (200, text/event-stream) goes out with the first event that
// proves the request was accepted (`PromptInfo`, a delta or the final event), so that errors
// before it (unknown model, full queue, prompt too long) still get their real status code.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "api/completion_service.hpp"
#include "api/openai_responses.hpp"

namespace brigade::api {

using ServiceEvent = std::variant<PromptInfo, PrefillProgress, Delta, Final, ServiceError>;

struct ResponseHead {
    int status = 200;
    std::string content_type = "application/json";
    bool stream = false;  // an open-ended SSE body (chunked)
};

struct ExchangeOutput {
    std::optional<ResponseHead> head;  // write this first (once per exchange)
    std::string body;                  // then these bytes
    bool finished = false;             // the response is complete after `body`
};

class CompletionExchange {
public:
    CompletionExchange(const CompletionRequest& request, std::int64_t created_unix);

    ExchangeOutput handle(ServiceEvent event);

    // Called by the driver when nothing was written for a while: a comment that keeps proxies
    // and clients from timing out during a long prompt. Empty when nothing may be sent yet.
    ExchangeOutput keepalive();

    // The driver gave up (client gone, too slow, server stopping): no more output.
    void abandon(std::string_view reason);

    bool finished() const { return finished_; }
    bool head_sent() const { return head_sent_; }
    const std::string& id() const { return meta_.id; }

    // One line for the log, once finished: id, model, prompt/cached tokens, prefill ms and
    // tok/s, decode tok/s, completion tokens, finish reason (or error).
    std::string log_line(double wall_ms) const;

private:
    ExchangeOutput on_prompt(const PromptInfo& info);
    ExchangeOutput on_progress(const PrefillProgress& progress);
    ExchangeOutput on_delta(Delta delta);
    ExchangeOutput on_final(Final final);
    ExchangeOutput on_error(const ServiceError& error);

    void open_stream(ExchangeOutput& out);
    std::string chunk_event(nlohmann::json delta, std::optional<FinishReason> finish,
                            std::vector<TokenLogprob> logprobs, std::string text);

    ResponseMeta meta_;
    Endpoint endpoint_;
    bool stream_;
    bool include_usage_;
    bool logprobs_;
    bool head_sent_ = false;
    bool finished_ = false;
    bool saw_tool_calls_ = false;
    std::size_t text_offset_ = 0;              // completions logprobs text_offset
    std::vector<TokenLogprob> held_logprobs_;  // logprobs waiting for a chunk with text
    AssembledOutput assembled_;                // non-stream
    PromptInfo prompt_;
    std::optional<Final> final_;
    std::optional<ServiceError> error_;
    std::string abandon_reason_;
};

}  // namespace brigade::api
