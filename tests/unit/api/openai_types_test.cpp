#include "api/openai_types.hpp"

#include <gtest/gtest.h>

namespace brigade::api {
namespace {

using nlohmann::json;

json minimal_chat() {
    return {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
}

// Parses `body` and expects a 400 naming `param`.
void expect_rejected(const json& body, const std::string& param, bool chat = true) {
    const ApiResult<CompletionRequest> result =
        chat ? parse_chat_request(body) : parse_completion_request(body);
    ASSERT_FALSE(result.has_value()) << body.dump();
    EXPECT_EQ(result.error().kind, ErrorKind::invalid_request) << body.dump();
    EXPECT_EQ(result.error().param, param) << result.error().message;
    EXPECT_NE(result.error().message.find(param), std::string::npos) << result.error().message;
}

TEST(ParseJsonBody, RejectsMalformedJson) {
    const auto result = parse_json_body("{\"model\": ");
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().kind, ErrorKind::invalid_json);
}

TEST(ParseJsonBody, NumberOverflowIsABadRequestNotACrash) {
    // nlohmann throws out_of_range (not parse_error) here; found by http_request_fuzz.
    const auto result = parse_json_body("{\"temperature\": 5e5555}");
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().kind, ErrorKind::invalid_json);
}

TEST(ParseJsonBody, RejectsInvalidUtf8WithOffset) {
    const auto result = parse_json_body("{\"a\": \"\xc3\x28\"}");
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().kind, ErrorKind::invalid_json);
    EXPECT_NE(result.error().message.find("UTF-8 (byte 7)"), std::string::npos)
        << result.error().message;
}

TEST(ParseJsonBody, RejectsNonObjects) {
    EXPECT_FALSE(parse_json_body("[1, 2]"));
    EXPECT_FALSE(parse_json_body("\"x\""));
    EXPECT_TRUE(parse_json_body(" {} "));
}

TEST(ParseChat, MinimalRequestAndDefaults) {
    const auto result = parse_chat_request(minimal_chat());
    ASSERT_TRUE(result) << result.error().message;
    const CompletionRequest& r = *result;
    EXPECT_EQ(r.endpoint, Endpoint::chat_completions);
    EXPECT_EQ(r.model, "m");
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_EQ(r.messages[0].role, "user");
    EXPECT_EQ(r.messages[0].content, "hi");
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.max_tokens);
    EXPECT_FALSE(r.sampling.temperature);  // the service's default applies
    EXPECT_TRUE(r.stop.empty());
    EXPECT_EQ(r.response_format, ResponseFormat::text);
}

TEST(ParseChat, AllFieldsMapped) {
    json body = minimal_chat();
    body.update(json::parse(R"({
        "stream": true, "stream_options": {"include_usage": true},
        "max_tokens": 50, "max_completion_tokens": 64, "temperature": 0.7, "top_p": 0.9,
        "top_k": 40, "min_p": 0.05, "seed": 7, "presence_penalty": 0.5,
        "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logit_bias": {"15": -100},
        "stop": ["\n\n", "END"], "n": 1, "logprobs": true, "top_logprobs": 3,
        "response_format": {"type": "json_object"}, "user": "ignored", "unknown_field": [1],
        "chat_template_kwargs": {"enable_thinking": false}, "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "get_weather",
                   "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}
    })"));
    const auto result = parse_chat_request(body);
    ASSERT_TRUE(result) << result.error().message;
    const CompletionRequest& r = *result;
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.max_tokens, 64);  // max_completion_tokens wins
    EXPECT_DOUBLE_EQ(*r.sampling.temperature, 0.7);
    EXPECT_DOUBLE_EQ(*r.sampling.top_p, 0.9);
    EXPECT_EQ(*r.sampling.top_k, 40);
    EXPECT_DOUBLE_EQ(*r.sampling.min_p, 0.05);
    EXPECT_EQ(*r.sampling.seed, 7u);
    EXPECT_DOUBLE_EQ(r.sampling.presence_penalty, 0.5);
    EXPECT_DOUBLE_EQ(r.sampling.frequency_penalty, -0.5);
    EXPECT_DOUBLE_EQ(*r.sampling.repetition_penalty, 1.1);
    ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
    EXPECT_EQ(r.sampling.logit_bias[0].first, 15);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 3);
    EXPECT_EQ(r.response_format, ResponseFormat::json_object);
    EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
    EXPECT_FALSE(r.parallel_tool_calls);
    EXPECT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.tool_choice.mode, ToolChoiceMode::function);
    EXPECT_EQ(r.tool_choice.function_name, "get_weather");
}

TEST(ParseChat, ContentPartsAndHistory) {
    json body = minimal_chat();
    body["messages"] = json::parse(R"([
        {"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_time", "arguments": {"tz": "CET"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}
    ])");
    const auto result = parse_chat_request(body);
    ASSERT_TRUE(result) << result.error().message;
    const auto& m = result->messages;
    ASSERT_EQ(m.size(), 4u);
    EXPECT_EQ(m[0].content, "Be brief.");
    EXPECT_EQ(m[2].content, "");
    ASSERT_EQ(m[2].tool_calls.size(), 2u);
    EXPECT_EQ(m[2].tool_calls[0].name, "get_weather");
    EXPECT_EQ(*m[2].tool_calls[0].arguments_object(), json({{"city", "Paris"}}));
    EXPECT_EQ(*m[2].tool_calls[1].arguments_object(), json({{"tz", "CET"}}));
    EXPECT_EQ(m[3].tool_call_id, "call_1");
}

TEST(ParseChat, EachFieldErrorNamesTheField) {
    auto with = [](const char* key, json value) {
        json body = minimal_chat();
        body[key] = std::move(value);
        return body;
    };
    expect_rejected(with("model", 5), "model");
    expect_rejected(with("messages", json::array()), "messages");
    expect_rejected(with("messages", "hi"), "messages");
    expect_rejected(with("n", 2), "n");
    expect_rejected(with("max_tokens", -1), "max_tokens");
    expect_rejected(with("max_tokens", 0), "max_tokens");
    expect_rejected(with("max_tokens", 1e15), "max_tokens");
    expect_rejected(with("max_tokens", 10.5), "max_tokens");
    expect_rejected(with("max_tokens", "100"), "max_tokens");
    expect_rejected(with("max_completion_tokens", 99999999999LL), "max_completion_tokens");
    expect_rejected(with("temperature", 2.5), "temperature");
    expect_rejected(with("temperature", -0.1), "temperature");
    expect_rejected(with("top_p", 1.5), "top_p");
    expect_rejected(with("top_k", -5), "top_k");
    expect_rejected(with("min_p", 2), "min_p");
    expect_rejected(with("presence_penalty", 3), "presence_penalty");
    expect_rejected(with("frequency_penalty", -3), "frequency_penalty");
    expect_rejected(with("stop", 5), "stop");
    expect_rejected(with("stop", json::array({"a", 1})), "stop[1]");
    expect_rejected(with("stop", json(std::vector<std::string>(17, "x"))), "stop");
    expect_rejected(with("stream", "yes"), "stream");
    expect_rejected(with("stream_options", json{{"include_usage", 1}}),
                    "stream_options.include_usage");
    expect_rejected(with("top_logprobs", 21), "top_logprobs");
    expect_rejected(with("top_logprobs", 2), "top_logprobs");  // without logprobs
    expect_rejected(with("response_format", json{{"type", "json_schema"}}), "response_format.type");
    expect_rejected(with("logit_bias", json{{"abc", 1}}), "logit_bias.abc");
    expect_rejected(with("logit_bias", json{{"5", 101}}), "logit_bias.5");
    expect_rejected(with("tools", json::array({{{"type", "retrieval"}}})), "tools[0].type");
    expect_rejected(
        with("tools", json::array({{{"type", "function"}, {"function", json::object()}}})),
        "tools[0].function.name");
    expect_rejected(with("tool_choice", "sometimes"), "tool_choice");
    expect_rejected(with("tool_choice", "required"), "tool_choice");  // no tools
}

TEST(ParseChat, MessageErrorsNameThePath) {
    auto with_messages = [](const char* messages) {
        json body = minimal_chat();
        body["messages"] = json::parse(messages);
        return body;
    };
    expect_rejected(with_messages(R"([{"content": "x"}])"), "messages[0].role");
    expect_rejected(with_messages(R"([{"role": "wizard", "content": "x"}])"), "messages[0].role");
    expect_rejected(with_messages(R"([{"role": "user", "content": 5}])"), "messages[0].content");
    expect_rejected(
        with_messages(
            R"([{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])"),
        "messages[1].content[0].type");
    expect_rejected(with_messages(R"([{"role": "user", "content": [{"type": "text"}]}])"),
                    "messages[0].content[0].text");
    expect_rejected(
        with_messages(
            R"([{"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]}])"),
        "messages[0].tool_calls[0].function.name");
    expect_rejected(with_messages(R"(["hello"])"), "messages[0]");
}

TEST(ParseChat, ImagePartMessageIsClear) {
    json body = minimal_chat();
    body["messages"][0]["content"] = json::parse(R"([{"type": "image_url"}])");
    const auto result = parse_chat_request(body);
    ASSERT_FALSE(result);
    EXPECT_NE(result.error().message.find("'image_url' is not supported"), std::string::npos)
        << result.error().message;
}

TEST(ParseChat, LenientWhereClientsDiffer) {
    json body = minimal_chat();
    body["stop"] = "###";
    body["top_k"] = -1;          // llama.cpp's "off"
    body["max_tokens"] = 100.0;  // JavaScript number
    body["tool_choice"] = "none";
    body["seed"] = -1;
    const auto result = parse_chat_request(body);
    ASSERT_TRUE(result) << result.error().message;
    EXPECT_EQ(result->stop, std::vector<std::string>{"###"});
    EXPECT_EQ(*result->sampling.top_k, 0);
    EXPECT_EQ(*result->max_tokens, 100);
    EXPECT_EQ(result->tool_choice.mode, ToolChoiceMode::none);
}

TEST(ParseCompletion, PromptShapes) {
    auto parse = [](json prompt) {
        return parse_completion_request({{"model", "m"}, {"prompt", std::move(prompt)}});
    };
    auto text = parse("Once upon");
    ASSERT_TRUE(text);
    EXPECT_EQ(text->prompt, "Once upon");
    EXPECT_EQ(text->endpoint, Endpoint::completions);
    auto one = parse(json::array({"A"}));
    ASSERT_TRUE(one);
    EXPECT_EQ(one->prompt, "A");
    auto ids = parse(json::array({1, 2, 3}));
    ASSERT_TRUE(ids);
    EXPECT_EQ(ids->prompt_token_ids, (std::vector<std::int32_t>{1, 2, 3}));
    auto nested = parse(json::array({json::array({4, 5})}));
    ASSERT_TRUE(nested);
    EXPECT_EQ(nested->prompt_token_ids, (std::vector<std::int32_t>{4, 5}));
}

TEST(ParseCompletion, Rejections) {
    expect_rejected({{"model", "m"}}, "prompt", false);
    expect_rejected({{"prompt", json::array({"a", "b"})}}, "prompt", false);
    expect_rejected({{"prompt", json::array({1, -2})}}, "prompt[1]", false);
    expect_rejected({{"prompt", "x"}, {"echo", true}}, "echo", false);
    expect_rejected({{"prompt", "x"}, {"suffix", "y"}}, "suffix", false);
    expect_rejected({{"prompt", "x"}, {"best_of", 2}}, "best_of", false);
    expect_rejected({{"prompt", "x"}, {"logprobs", 30}}, "logprobs", false);
    expect_rejected({{"prompt", "x"}, {"n", 3}}, "n", false);
}

TEST(ParseCompletion, LegacyLogprobsCount) {
    const auto result = parse_completion_request({{"prompt", "x"}, {"logprobs", 2}});
    ASSERT_TRUE(result);
    EXPECT_TRUE(result->logprobs);
    EXPECT_EQ(result->top_logprobs, 2);
}

}  // namespace
}  // namespace brigade::api
