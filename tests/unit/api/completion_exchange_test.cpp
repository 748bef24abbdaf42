#include "api/completion_exchange.hpp"

#include <gtest/gtest.h>

#include "api/errors.hpp"
#include "api/sse.hpp"

namespace brigade::api {
namespace {

using nlohmann::json;

CompletionRequest chat_request(bool stream, bool include_usage = false) {
    CompletionRequest r;
    r.id = "chatcmpl-test";
    r.model = "alias";
    r.endpoint = Endpoint::chat_completions;
    r.stream = stream;
    r.include_usage = include_usage;
    return r;
}

Delta text(std::string content) {
    Delta d;
    d.content = std::move(content);
    return d;
}

Final final_event(FinishReason reason, std::int64_t prompt, std::int64_t completion) {
    Final f;
    f.finish_reason = reason;
    f.usage.prompt_tokens = prompt;
    f.usage.completion_tokens = completion;
    f.usage.cached_tokens = 3;
    f.timings = {100.0, 7, 200.0, 4};
    return f;
}

// Parses all `data:` events of an SSE body.
std::vector<std::string> events(const std::string& body) {
    SseParser parser;
    std::vector<SseMessage> messages;
    parser.feed(body, messages);
    std::vector<std::string> out;
    for (auto& m : messages) {
        if (!m.comment) out.push_back(m.data);
    }
    return out;
}

TEST(CompletionExchange, NonStreamChat) {
    CompletionExchange x(chat_request(false), 1700000000);
    EXPECT_FALSE(x.handle(PromptInfo{"real-model-id", 10, 3}).head);
    EXPECT_TRUE(x.handle(text("Hel")).body.empty());
    x.handle(text("lo"));
    Delta reasoning;
    reasoning.reasoning = "thinking";
    x.handle(reasoning);
    const ExchangeOutput out = x.handle(final_event(FinishReason::stop, 10, 4));
    ASSERT_TRUE(out.head);
    EXPECT_EQ(out.head->status, 200);
    EXPECT_FALSE(out.head->stream);
    EXPECT_TRUE(out.finished);
    const json body = json::parse(out.body);
    EXPECT_EQ(body["id"], "chatcmpl-test");
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["created"], 1700000000);
    EXPECT_EQ(body["model"], "real-model-id");
    EXPECT_EQ(body["choices"][0]["index"], 0);
    EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "thinking");
    EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(body["usage"]["prompt_tokens"], 10);
    EXPECT_EQ(body["usage"]["completion_tokens"], 4);
    EXPECT_EQ(body["usage"]["total_tokens"], 14);
    EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    EXPECT_NE(x.log_line(5).find("prompt=10 cached=3 prefill=100.0ms (70.0 tok/s)"),
              std::string::npos)
        << x.log_line(5);
    EXPECT_NE(x.log_line(5).find("decode=20.0 tok/s finish=stop"), std::string::npos);
}

// A request served over the network names its hops and their latencies at the end of its log
// line (an unmeasured one as "?"); one served by a single node has no hops= at all.
TEST(CompletionExchange, LogLineNamesTheHops) {
    CompletionExchange x(chat_request(false), 1);
    Final f;
    f.usage.prompt_tokens = 3;
    f.usage.completion_tokens = 2;
    EXPECT_EQ(x.log_line(1).find("hops="), std::string::npos);
    f.timings.hops = {{"aaaa1111", "bbbb2222", 0.214}, {"bbbb2222", "aaaa1111", -1.0}};
    x.handle(f);
    const std::string line = x.log_line(7);
    EXPECT_NE(line.find("wall=7ms hops=aaaa1111>bbbb2222:0.21ms,bbbb2222>aaaa1111:?"),
              std::string::npos)
        << line;
    CompletionExchange alone(chat_request(false), 1);
    f.timings.hops.clear();
    alone.handle(f);
    EXPECT_EQ(alone.log_line(7).find("hops="), std::string::npos) << alone.log_line(7);
}

TEST(CompletionExchange, NonStreamToolCalls) {
    CompletionExchange x(chat_request(false), 1);
    Delta first;
    first.tool_calls.push_back({0, "call_a", "get_weather", "{\"ci"});
    x.handle(first);
    Delta second;
    second.tool_calls.push_back({0, "", "", "ty\": \"Paris\"}"});
    x.handle(second);
    const json body = json::parse(x.handle(final_event(FinishReason::stop, 5, 9)).body);
    const json& message = body["choices"][0]["message"];
    EXPECT_TRUE(message["content"].is_null());
    ASSERT_EQ(message["tool_calls"].size(), 1u);
    EXPECT_EQ(message["tool_calls"][0]["id"], "call_a");
    EXPECT_EQ(message["tool_calls"][0]["type"], "function");
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
    // The service said stop, but calls were made: OpenAI clients expect tool_calls.
    EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
}

TEST(CompletionExchange, StreamChatChunks) {
    CompletionExchange x(chat_request(true, /*include_usage=*/true), 42);
    ExchangeOutput out = x.handle(PromptInfo{"", 10, 0});
    ASSERT_TRUE(out.head);
    EXPECT_TRUE(out.head->stream);
    EXPECT_EQ(out.head->content_type, "text/event-stream");
    std::string body = out.body;
    body += x.handle(text("Hi")).body;
    Delta call;
    call.tool_calls.push_back({0, "call_1", "f", ""});
    body += x.handle(call).body;
    Delta args;
    args.tool_calls.push_back({0, "", "", "{\"a\":1}"});
    body += x.handle(args).body;
    out = x.handle(final_event(FinishReason::stop, 10, 5));
    EXPECT_TRUE(out.finished);
    body += out.body;
    EXPECT_TRUE(body.ends_with("data: [DONE]\n\n"));

    const auto data = events(body);
    ASSERT_EQ(data.size(), 7u);  // role, text, call, args, final, usage, [DONE]
    std::vector<json> chunks;
    for (std::size_t i = 0; i + 1 < data.size(); ++i) chunks.push_back(json::parse(data[i]));
    for (std::size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(chunks[i]["object"], "chat.completion.chunk");
        EXPECT_EQ(chunks[i]["id"], "chatcmpl-test");
        EXPECT_EQ(chunks[i]["model"], "alias");
        EXPECT_TRUE(chunks[i]["usage"].is_null()) << "include_usage: usage null until the end";
        EXPECT_TRUE(chunks[i].contains("usage"));
    }
    EXPECT_EQ(chunks[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
    EXPECT_EQ(chunks[1]["choices"][0]["delta"], json({{"content", "Hi"}}));
    EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
    EXPECT_EQ(chunks[2]["choices"][0]["delta"]["tool_calls"][0],
              json::parse(R"({"index":0,"id":"call_1","type":"function",
                              "function":{"name":"f","arguments":""}})"));
    EXPECT_EQ(chunks[3]["choices"][0]["delta"]["tool_calls"][0],
              json::parse(R"({"index":0,"function":{"arguments":"{\"a\":1}"}})"));
    EXPECT_EQ(chunks[4]["choices"][0]["delta"], json::object());
    EXPECT_EQ(chunks[4]["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(chunks[5]["choices"], json::array());
    EXPECT_EQ(chunks[5]["usage"]["completion_tokens"], 5);
    EXPECT_EQ(data[6], "[DONE]");
}

TEST(CompletionExchange, StreamWithoutIncludeUsageHasNoUsageField) {
    CompletionExchange x(chat_request(true), 1);
    std::string body = x.handle(text("a")).body;  // a delta also opens the stream
    body += x.handle(final_event(FinishReason::length, 1, 1)).body;
    const auto data = events(body);
    ASSERT_EQ(data.size(), 4u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(json::parse(data[i]).contains("usage"));
    EXPECT_EQ(json::parse(data[2])["choices"][0]["finish_reason"], "length");
}

TEST(CompletionExchange, ErrorBeforeStreamGetsItsStatus) {
    CompletionExchange x(chat_request(true), 1);
    const ExchangeOutput out =
        x.handle(make_api_error(ErrorKind::model_not_found, "model 'gpt-9' not found", "model"));
    ASSERT_TRUE(out.head);
    EXPECT_EQ(out.head->status, 404);
    EXPECT_FALSE(out.head->stream);
    EXPECT_EQ(json::parse(out.body)["error"]["code"], "model_not_found");
    EXPECT_TRUE(out.finished);
    EXPECT_TRUE(x.handle(text("late")).body.empty()) << "no output after the end";
}

TEST(CompletionExchange, ErrorMidStreamIsAnEvent) {
    CompletionExchange x(chat_request(true), 1);
    x.handle(PromptInfo{"", 1, 0});
    const ExchangeOutput out = x.handle(make_api_error(ErrorKind::internal, "engine failed"));
    EXPECT_FALSE(out.head);
    const auto data = events(out.body);
    ASSERT_EQ(data.size(), 1u);
    EXPECT_EQ(json::parse(data[0])["error"]["message"], "engine failed (request id chatcmpl-test)");
    EXPECT_NE(x.log_line(1).find("error=internal"), std::string::npos);
}

TEST(CompletionExchange, KeepaliveOnlyOnceStreaming) {
    CompletionExchange x(chat_request(true), 1);
    EXPECT_TRUE(x.keepalive().body.empty());
    x.handle(PromptInfo{"", 1, 0});
    EXPECT_EQ(x.keepalive().body, ": keep-alive\n\n");
    EXPECT_EQ(x.handle(PrefillProgress{512, 2048}).body, ": prompt 512/2048\n\n");
}

TEST(CompletionExchange, LogprobsRideOnTextChunks) {
    CompletionRequest r = chat_request(true);
    r.logprobs = true;
    CompletionExchange x(r, 1);
    x.handle(PromptInfo{"", 1, 0});
    Delta held;  // text held back by a stop matcher: logprobs arrive first
    held.logprobs.push_back({"\xe6\x97", -0.5, {}});
    EXPECT_TRUE(x.handle(held).body.empty());
    Delta visible = text("日");
    visible.logprobs.push_back({"\xa5", -0.25, {{"\xa5", -0.25}, {"x", -2.0}}});
    const auto data = events(x.handle(visible).body);
    ASSERT_EQ(data.size(), 1u);
    const json lp = json::parse(data[0])["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(lp.size(), 2u);
    EXPECT_EQ(lp[0]["bytes"], json::array({0xe6, 0x97}));
    EXPECT_EQ(lp[0]["logprob"], -0.5);
    EXPECT_EQ(lp[1]["top_logprobs"].size(), 2u);
    EXPECT_EQ(lp[1]["top_logprobs"][1]["token"], "x");
}

TEST(CompletionExchange, TextCompletionStream) {
    CompletionRequest r = chat_request(true);
    r.id = "cmpl-1";
    r.endpoint = Endpoint::completions;
    CompletionExchange x(r, 1);
    std::string body = x.handle(PromptInfo{"", 3, 0}).body;
    EXPECT_TRUE(body.empty()) << "completions have no role chunk";
    body += x.handle(text(" upon")).body;
    body += x.handle(final_event(FinishReason::length, 3, 1)).body;
    const auto data = events(body);
    ASSERT_EQ(data.size(), 3u);
    const json first = json::parse(data[0]);
    EXPECT_EQ(first["object"], "text_completion");
    EXPECT_EQ(first["choices"][0]["text"], " upon");
    EXPECT_EQ(json::parse(data[1])["choices"][0]["finish_reason"], "length");
}

TEST(CompletionExchange, TextCompletionNonStream) {
    CompletionRequest r = chat_request(false);
    r.endpoint = Endpoint::completions;
    CompletionExchange x(r, 1);
    x.handle(text("abc"));
    const json body = json::parse(x.handle(final_event(FinishReason::stop, 3, 1)).body);
    EXPECT_EQ(body["object"], "text_completion");
    EXPECT_EQ(body["choices"][0]["text"], "abc");
    EXPECT_EQ(body["usage"]["total_tokens"], 4);
}

}  // namespace
}  // namespace brigade::api
