// A real tool-call round trip through `brigade serve` on the demo model, which was trained to call
// tools (scripts/demo_tool_chats.py): chat with `tools` -> `tool_calls` (name and JSON arguments,
// finish_reason tool_calls), non-streamed and streamed as deltas -> the tool result goes back ->
// the answer uses it. Every expectation comes from model/demo/reference.json, written by PyTorch at
// training time: the calls and answers it decoded greedily, and the prompts it rendered with
// transformers' apply_chat_template (so prompt token counts check our template and tokenizer).
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "tests/integration/serve/serve_process.hpp"

namespace brigade::test {
namespace {

using nlohmann::json;
// The reference keeps its key order: a tool result sent back must be the very JSON text the
// reference conversation had.
using ordered = nlohmann::ordered_json;

const ordered& reference() {
    static const ordered ref =
        ordered::parse(read_file(source_dir() / "model/demo/reference.json"));
    return ref;
}

// The round trips PyTorch decoded (BF16): [0] the weather in Paris, [1] 12 plus 30.
const ordered& round_trip(std::size_t i) {
    return reference()["tool_calls"]["bf16"]["round_trips"].at(i);
}

ordered user_turn(const ordered& trip) { return trip["call"]["messages"]; }

ordered call_body(const ordered& trip) {
    return {{"model", "demo"},
            {"messages", user_turn(trip)},
            {"tools", trip["case"]["tools"]},
            {"tool_choice", "auto"},
            {"temperature", 0},
            {"max_tokens", 64}};
}

// The second request: the question, the assistant's call as the server returned it, the result
// as a client sends it (compact JSON, as JSON.stringify writes it).
ordered answer_body(const ordered& trip, const std::string& call_id) {
    ordered messages = user_turn(trip);
    messages.push_back({{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls",
                         {{{"id", call_id},
                           {"type", "function"},
                           {"function",
                            {{"name", trip["case"]["name"]},
                             {"arguments", trip["case"]["arguments"].dump()}}}}}}});
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", call_id}, {"content", trip["case"]["result"].dump()}});
    return {{"model", "demo"},
            {"messages", messages},
            {"tools", trip["case"]["tools"]},
            {"temperature", 0},
            {"max_tokens", 64}};
}

// Tool calls put back together from streamed deltas, by index.
struct StreamedCall {
    std::string id, name, arguments;
    int fragments = 0;
};
std::map<int, StreamedCall> assemble_calls(const StreamReply& s) {
    std::map<int, StreamedCall> calls;
    for (const auto& chunk : s.chunks) {
        if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
        const auto& delta = chunk["choices"][0]["delta"];
        if (!delta.contains("tool_calls")) continue;
        for (const auto& d : delta["tool_calls"]) {
            auto& call = calls[d.at("index").get<int>()];
            ++call.fragments;
            if (d.contains("id")) call.id += d["id"].get<std::string>();
            if (!d.contains("function")) continue;
            const auto& fn = d["function"];
            if (fn.contains("name")) call.name += fn["name"].get<std::string>();
            if (fn.contains("arguments")) call.arguments += fn["arguments"].get<std::string>();
        }
    }
    return calls;
}

class ServeTools : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        server_ = std::make_unique<ServeProcess>(std::vector<std::string>{"--temp", "0"});
    }
    static void TearDownTestSuite() {
        if (server_ && server_->ready()) {
            EXPECT_EQ(server_->terminate(), 0) << server_->log();
        }
        server_.reset();
    }
    void SetUp() override {
        ASSERT_TRUE(server_ && server_->ready()) << (server_ ? server_->log() : "");
    }
    static std::unique_ptr<ServeProcess> server_;
};
std::unique_ptr<ServeProcess> ServeTools::server_;

TEST_F(ServeTools, ReferenceRoundTripsAreRight) {
    // What the test relies on: PyTorch's greedy decoding made the right call and used the result.
    for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_TRUE(round_trip(i)["right_call"].get<bool>()) << i;
        EXPECT_TRUE(round_trip(i)["right_answer"].get<bool>()) << i;
    }
}

TEST_F(ServeTools, NonStreamedRoundTrip) {
    for (std::size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE("round trip " + std::to_string(i));
        const ordered& trip = round_trip(i);
        auto first = server_->post_raw("/v1/chat/completions", call_body(trip).dump());
        ASSERT_EQ(first.status, 200) << first.body;
        const auto& choice = first.json["choices"][0];
        EXPECT_EQ(choice["finish_reason"], "tool_calls") << first.body;
        EXPECT_TRUE(choice["message"]["content"].is_null()) << first.body;
        ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << first.body;
        const auto& call = choice["message"]["tool_calls"][0];
        EXPECT_EQ(call["type"], "function");
        const std::string id = call["id"].get<std::string>();
        EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
        EXPECT_EQ(call["function"]["name"], trip["case"]["name"]);
        ASSERT_TRUE(call["function"]["arguments"].is_string()) << first.body;
        EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
                  json::parse(trip["case"]["arguments"].dump()));
        // Same prompt as transformers rendered and tokenized; same tokens as PyTorch decoded.
        EXPECT_EQ(first.json["usage"]["prompt_tokens"], trip["call"]["prompt_ids"].size());
        EXPECT_EQ(first.json["usage"]["completion_tokens"], trip["call"]["ids"].size());

        auto second = server_->post_raw("/v1/chat/completions", answer_body(trip, id).dump());
        ASSERT_EQ(second.status, 200) << second.body;
        const auto& answer = second.json["choices"][0];
        EXPECT_EQ(answer["finish_reason"], "stop") << second.body;
        EXPECT_FALSE(answer["message"].contains("tool_calls")) << second.body;
        const std::string text = answer["message"]["content"].get<std::string>();
        EXPECT_EQ(text, trip["answer"]["text"]);
        for (const auto& part : trip["case"]["expect_in_answer"]) {
            EXPECT_NE(text.find(part.get<std::string>()), std::string::npos) << text;
        }
        EXPECT_EQ(second.json["usage"]["prompt_tokens"], trip["answer"]["prompt_ids"].size());
    }
}

TEST_F(ServeTools, StreamedRoundTrip) {
    for (std::size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE("round trip " + std::to_string(i));
        const ordered& trip = round_trip(i);
        auto body = call_body(trip);
        body["stream_options"] = {{"include_usage", true}};
        auto s = server_->stream("/v1/chat/completions", json::parse(body.dump()));
        ASSERT_EQ(s.status, 200) << s.error_body;
        EXPECT_TRUE(s.done);
        EXPECT_EQ(s.finish_reason, "tool_calls");
        EXPECT_EQ(s.content, "");  // only the call: no text leaks out of <tool_call>
        const auto calls = assemble_calls(s);
        ASSERT_EQ(calls.size(), 1u);
        const StreamedCall& call = calls.begin()->second;
        EXPECT_EQ(calls.begin()->first, 0);
        EXPECT_EQ(call.name, trip["case"]["name"]);
        EXPECT_EQ(call.id.rfind("call_", 0), 0u) << call.id;
        EXPECT_EQ(json::parse(call.arguments, nullptr, false),
                  json::parse(trip["case"]["arguments"].dump()))
            << call.arguments;
        ASSERT_FALSE(s.chunks.empty());
        EXPECT_EQ(s.chunks.back()["usage"]["prompt_tokens"], trip["call"]["prompt_ids"].size());

        auto answer =
            server_->stream("/v1/chat/completions", json::parse(answer_body(trip, call.id).dump()));
        ASSERT_EQ(answer.status, 200) << answer.error_body;
        EXPECT_TRUE(answer.done);
        EXPECT_EQ(answer.finish_reason, "stop");
        EXPECT_EQ(answer.content, trip["answer"]["text"]);
        EXPECT_TRUE(assemble_calls(answer).empty());
    }
}

TEST_F(ServeTools, ToolChoiceNoneLeavesToolsOut) {
    // With tool_choice "none" the template gets no tools: the prompt is the plain chat one and
    // nothing is parsed as a call.
    auto body = call_body(round_trip(0));
    body["tool_choice"] = "none";
    auto r = server_->post_raw("/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_LT(r.json["usage"]["prompt_tokens"].get<std::size_t>(),
              round_trip(0)["call"]["prompt_ids"].size());
    EXPECT_NE(r.json["choices"][0]["finish_reason"], "tool_calls") << r.body;
    EXPECT_FALSE(r.json["choices"][0]["message"].contains("tool_calls")) << r.body;
    auto plain =
        server_->post("/v1/chat/completions", chat_body("What is the weather in Paris?", 64));
    ASSERT_EQ(plain.status, 200) << plain.body;
    EXPECT_EQ(r.json["usage"]["prompt_tokens"], plain.json["usage"]["prompt_tokens"]);
    EXPECT_EQ(r.json["choices"][0]["message"]["content"],
              plain.json["choices"][0]["message"]["content"]);
}

// The MLX 8-bit and 4-bit copies make the same round trips as PyTorch did from their dequantized
// weights (reference.json keeps them per copy).
TEST(ServeToolsQuantized, RoundTripsEqualPyTorch) {
    for (const char* copy : {"mlx_q8", "mlx_q4"}) {
        const std::string dir = std::string(copy) == "mlx_q8" ? "mlx-q8" : "mlx-q4";
        SCOPED_TRACE(copy);
        ServeProcess server({"--model", (source_dir() / "model/demo" / dir).string(), "--alias",
                             "demo", "--temp", "0"});
        ASSERT_TRUE(server.ready()) << server.log();
        const auto& trips = reference()["tool_calls"][copy]["round_trips"];
        ASSERT_EQ(trips.size(), 2u);
        for (const auto& trip : trips) {
            ASSERT_TRUE(trip["right_call"].get<bool>() && trip["right_answer"].get<bool>());
            auto first = server.post_raw("/v1/chat/completions", call_body(trip).dump());
            ASSERT_EQ(first.status, 200) << first.body;
            const auto& calls = first.json["choices"][0]["message"]["tool_calls"];
            ASSERT_EQ(calls.size(), 1u) << first.body;
            EXPECT_EQ(calls[0]["function"]["name"], trip["case"]["name"].get<std::string>());
            EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()),
                      json::parse(trip["case"]["arguments"].dump()));
            auto second =
                server.post_raw("/v1/chat/completions", answer_body(trip, calls[0]["id"]).dump());
            ASSERT_EQ(second.status, 200) << second.body;
            EXPECT_EQ(second.json["choices"][0]["message"]["content"],
                      trip["answer"]["text"].get<std::string>());
        }
        EXPECT_EQ(server.terminate(), 0) << server.log();
    }
}

// The demo template renders as transformers' apply_chat_template did at training time.
TEST(DemoChatTemplate, MatchesTransformersOnToolChats) {
    const auto& cases = reference()["chat_template_cases"];
    ASSERT_GE(cases.size(), 8u);
    TempDir dir;
    int n = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE("case " + std::to_string(n));
        ordered body = {{"messages", c["messages"]}};
        if (!c["tools"].is_null()) body["tools"] = c["tools"];
        const auto path = dir.path() / ("case" + std::to_string(n++) + ".json");
        write_file(path, body.dump());
        std::vector<std::string> args = {"template", "--model",
                                         (source_dir() / "model/demo").string(), "--messages",
                                         path.string()};
        if (!c["add_generation_prompt"].get<bool>()) args.push_back("--no-generation-prompt");
        auto r = run_brigade(args);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, c["rendered"].get<std::string>());
    }
}

}  // namespace
}  // namespace brigade::test
