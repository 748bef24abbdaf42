#pragma once
// Service events → OpenAI response JSON (formats.md §6.2, §6.3, §6.5): chat.completion,
// chat.completion.chunk, text_completion, usage, logprobs, the model list. Pure functions.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/completion_service.hpp"

namespace brigade::api {

struct ResponseMeta {
    std::string id;
    std::string model;
    std::int64_t created = 0;  // unix seconds
};

std::string_view finish_reason_name(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
//  {"cached_tokens"}, "completion_tokens_details": {"reasoning_tokens"}}
nlohmann::json usage_json(const Usage& usage);

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& tokens);

// Legacy completions logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
nlohmann::json text_logprobs_json(const std::vector<TokenLogprob>& tokens,
                                  std::size_t first_text_offset);

// The whole output of a non-streamed request, built from its deltas.
struct AssembledToolCall {
    std::string id;
    std::string name;
    std::string arguments;
};

struct AssembledOutput {
    std::string content;
    std::string reasoning;
    std::vector<AssembledToolCall> tool_calls;  // by index
    std::vector<TokenLogprob> logprobs;

    void add(const Delta& delta);
};

nlohmann::json chat_completion_json(const ResponseMeta& meta, const AssembledOutput& output,
                                    FinishReason finish, const Usage& usage, bool logprobs);

nlohmann::json text_completion_json(const ResponseMeta& meta, const AssembledOutput& output,
                                    FinishReason finish, const Usage& usage, bool logprobs);

// The `delta` object of a chat chunk for `delta` (content, reasoning_content, tool_calls).
nlohmann::json chat_delta_json(const Delta& delta);

// A chat.completion.chunk. `usage_null` adds "usage": null (include_usage streams).
nlohmann::json chat_chunk_json(const ResponseMeta& meta, nlohmann::json delta,
                               std::optional<FinishReason> finish, nlohmann::json logprobs,
                               bool usage_null);

// A text_completion stream chunk.
nlohmann::json text_chunk_json(const ResponseMeta& meta, std::string text,
                               std::optional<FinishReason> finish, nlohmann::json logprobs,
                               bool usage_null);

// The final usage chunk of an include_usage stream: "choices": [] and usage.
nlohmann::json usage_chunk_json(const ResponseMeta& meta, std::string_view object,
                                const Usage& usage);

// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created", "owned_by",
// "context_length"?, "aliases"?}]}. Aliases are also listed as their own entries so that
// clients that pick from the list find every name the model answers to.
nlohmann::json models_json(const std::vector<ModelInfo>& models);
// One entry of that list: `model` under `name` (its id, or an alias with "root": the id).
nlohmann::json model_json(const ModelInfo& model, const std::string& name);

// `value.dump()` that never throws: invalid UTF-8 (impossible from our own deltas, but cheap
// to guard) is replaced.
std::string dump_json(const nlohmann::json& value);

}  // namespace brigade::api
