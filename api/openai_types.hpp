#pragma once
// OpenAI request JSON → `CompletionRequest`, with validation that names the field at fault
// (400 `invalid_request_error` with `param`, formats.md §6.1). Unknown fields are ignored, as
// OpenAI-compatible servers do; `user` is ignored. Model names are not resolved here: the
// service knows which names its model answers to.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "api/completion_service.hpp"
#include "api/errors.hpp"

namespace brigade::api {

struct RequestLimits {
    // Above this `max_tokens` is an error rather than "until the context is full": a number
    // this big is a client bug (the service still checks against its context length).
    std::int64_t max_tokens = 1 << 20;
    std::size_t max_messages = 10000;
    std::size_t max_stop_strings = 16;  // OpenAI allows 4; clients sometimes send more
    std::size_t max_stop_bytes = 512;
    std::size_t max_tools = 512;
    std::size_t max_logit_bias = 4096;
    std::size_t max_prompt_token_ids = 1 << 20;
};

// Checks UTF-8 and JSON syntax; the top level must be an object. Errors are `invalid_json`.
ApiResult<nlohmann::json> parse_json_body(std::string_view body);

// POST /v1/chat/completions.
ApiResult<CompletionRequest> parse_chat_request(const nlohmann::json& body,
                                                const RequestLimits& limits = {});

// POST /v1/completions (legacy text completions): one prompt (string, [string], token ids or
// [token ids]); `echo`, `suffix` and `best_of` > 1 are refused.
ApiResult<CompletionRequest> parse_completion_request(const nlohmann::json& body,
                                                      const RequestLimits& limits = {});

}  // namespace brigade::api
