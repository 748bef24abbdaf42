#include "api/openai_responses.hpp"

#include <utility>

#include "api/utf8.hpp"

namespace brigade::api {

using nlohmann::json;

std::string_view finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::stop:
            return "stop";
        case FinishReason::length:
            return "length";
        case FinishReason::tool_calls:
            return "tool_calls";
    }
    return "stop";
}

json usage_json(const Usage& usage) {
    return {{"prompt_tokens", usage.prompt_tokens},
            {"completion_tokens", usage.completion_tokens},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
            {"completion_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}}};
}

namespace {

json bytes_json(std::string_view token) {
    json bytes = json::array();
    for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
    return bytes;
}

// JSON has no -inf; a masked alternative is reported with OpenAI's floor value.
double finite_logprob(double x) { return x < -9999.0 || x != x ? -9999.0 : x; }

}  // namespace

json chat_logprobs_json(const std::vector<TokenLogprob>& tokens) {
    json content = json::array();
    for (const auto& token : tokens) {
        json top = json::array();
        for (const auto& alt : token.top_logprobs) {
            top.push_back({{"token", sanitize_utf8(alt.token)},
                           {"logprob", finite_logprob(alt.logprob)},
                           {"bytes", bytes_json(alt.token)}});
        }
        content.push_back({{"token", sanitize_utf8(token.token)},
                           {"logprob", finite_logprob(token.logprob)},
                           {"bytes", bytes_json(token.token)},
                           {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
}

json text_logprobs_json(const std::vector<TokenLogprob>& tokens, std::size_t first_text_offset) {
    json text_tokens = json::array(), token_logprobs = json::array(), top = json::array(),
         offsets = json::array();
    std::size_t offset = first_text_offset;
    for (const auto& token : tokens) {
        text_tokens.push_back(sanitize_utf8(token.token));
        token_logprobs.push_back(finite_logprob(token.logprob));
        json alternatives = json::object();
        for (const auto& alt : token.top_logprobs) {
            alternatives[sanitize_utf8(alt.token)] = finite_logprob(alt.logprob);
        }
        top.push_back(std::move(alternatives));
        offsets.push_back(offset);
        offset += token.token.size();
    }
    return {{"tokens", std::move(text_tokens)},
            {"token_logprobs", std::move(token_logprobs)},
            {"top_logprobs", std::move(top)},
            {"text_offset", std::move(offsets)}};
}

void AssembledOutput::add(const Delta& delta) {
    content += delta.content;
    reasoning += delta.reasoning;
    for (const auto& call : delta.tool_calls) {
        if (call.index < 0) continue;
        const auto index = static_cast<std::size_t>(call.index);
        if (index >= tool_calls.size()) tool_calls.resize(index + 1);
        AssembledToolCall& assembled = tool_calls[index];
        if (!call.id.empty()) assembled.id = call.id;
        if (!call.name.empty()) assembled.name = call.name;
        assembled.arguments += call.arguments;
    }
    logprobs.insert(logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
}

json chat_completion_json(const ResponseMeta& meta, const AssembledOutput& output,
                          FinishReason finish, const Usage& usage, bool logprobs) {
    json message = {{"role", "assistant"}};
    // OpenAI sends content null when the answer is only tool calls.
    if (output.content.empty() && !output.tool_calls.empty()) {
        message["content"] = nullptr;
    } else {
        message["content"] = output.content;
    }
    if (!output.reasoning.empty()) message["reasoning_content"] = output.reasoning;
    if (!output.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& call : output.tool_calls) {
            calls.push_back({{"id", call.id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
    }
    json choice = {{"index", 0},
                   {"message", std::move(message)},
                   {"logprobs", logprobs ? chat_logprobs_json(output.logprobs) : json(nullptr)},
                   {"finish_reason", finish_reason_name(finish)}};
    return {{"id", meta.id},
            {"object", "chat.completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({std::move(choice)})},
            {"usage", usage_json(usage)}};
}

json text_completion_json(const ResponseMeta& meta, const AssembledOutput& output,
                          FinishReason finish, const Usage& usage, bool logprobs) {
    json choice = {{"index", 0},
                   {"text", output.content},
                   {"logprobs", logprobs ? text_logprobs_json(output.logprobs, 0) : json(nullptr)},
                   {"finish_reason", finish_reason_name(finish)}};
    return {{"id", meta.id},
            {"object", "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({std::move(choice)})},
            {"usage", usage_json(usage)}};
}

json chat_delta_json(const Delta& delta) {
    json out = json::object();
    if (!delta.content.empty()) out["content"] = delta.content;
    if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
    if (!delta.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& call : delta.tool_calls) {
            json entry = {{"index", call.index}};
            json function = json::object();
            if (!call.id.empty()) {
                // The first fragment of a call names it (OpenAI shape).
                entry["id"] = call.id;
                entry["type"] = "function";
                function["name"] = call.name;
            }
            function["arguments"] = call.arguments;
            entry["function"] = std::move(function);
            calls.push_back(std::move(entry));
        }
        out["tool_calls"] = std::move(calls);
    }
    return out;
}

json chat_chunk_json(const ResponseMeta& meta, json delta, std::optional<FinishReason> finish,
                     json logprobs, bool usage_null) {
    json choice = {{"index", 0},
                   {"delta", std::move(delta)},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", finish ? json(finish_reason_name(*finish)) : json(nullptr)}};
    json chunk = {{"id", meta.id},
                  {"object", "chat.completion.chunk"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array({std::move(choice)})}};
    if (usage_null) chunk["usage"] = nullptr;
    return chunk;
}

json text_chunk_json(const ResponseMeta& meta, std::string text, std::optional<FinishReason> finish,
                     json logprobs, bool usage_null) {
    json choice = {{"index", 0},
                   {"text", std::move(text)},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", finish ? json(finish_reason_name(*finish)) : json(nullptr)}};
    json chunk = {{"id", meta.id},
                  {"object", "text_completion"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array({std::move(choice)})}};
    if (usage_null) chunk["usage"] = nullptr;
    return chunk;
}

json usage_chunk_json(const ResponseMeta& meta, std::string_view object, const Usage& usage) {
    return {{"id", meta.id},       {"object", object},         {"created", meta.created},
            {"model", meta.model}, {"choices", json::array()}, {"usage", usage_json(usage)}};
}

json model_json(const ModelInfo& model, const std::string& name) {
    json e = {{"id", name},
              {"object", "model"},
              {"created", model.created},
              {"owned_by", model.owned_by}};
    if (model.context_length > 0) e["context_length"] = model.context_length;
    if (name != model.id) e["root"] = model.id;
    if (name == model.id && !model.aliases.empty()) e["aliases"] = model.aliases;
    return e;
}

json models_json(const std::vector<ModelInfo>& models) {
    json data = json::array();
    for (const auto& model : models) {
        data.push_back(model_json(model, model.id));
        for (const auto& alias : model.aliases) data.push_back(model_json(model, alias));
    }
    return {{"object", "list"}, {"data", std::move(data)}};
}

std::string dump_json(const json& value) {
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace brigade::api
