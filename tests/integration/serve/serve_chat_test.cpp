// `brigade serve` on the demo model, driven over HTTP: greedy output equals `brigade run`,
// streaming equals non-streaming, usage, stop strings, length, names, errors.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "tests/integration/serve/serve_process.hpp"

namespace brigade::test {
namespace {

// `brigade run` greedy text for the demo template around `user` (the reference output).
std::string run_greedy(const std::string& user, int n) {
    auto r = run_brigade({"run", "--prompt", demo_prompt(user), "-n", std::to_string(n), "--temp",
                          "0", "--threads", "2"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
    return r.out;
}

std::size_t count_tokens(const std::string& text) {
    auto r = run_brigade(
        {"tokenize", "--model", (source_dir() / "model/demo").string(), "--text", text});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out).size();
}

class ServeChat : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        server_ = std::make_unique<ServeProcess>(std::vector<std::string>{
            "--temp", "0", "--alias", "my-alias", "--max-concurrency", "4"});
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
std::unique_ptr<ServeProcess> ServeChat::server_;

TEST_F(ServeChat, HealthAndModels) {
    auto h = server_->get("/health");
    EXPECT_EQ(h.status, 200) << h.body;
    auto m = server_->get("/v1/models");
    ASSERT_EQ(m.status, 200) << m.body;
    ASSERT_TRUE(m.json.contains("data")) << m.body;
    EXPECT_EQ(m.json["data"][0]["id"], "demo") << m.body;
}

TEST_F(ServeChat, NonStreamingGreedyEqualsRun) {
    const std::string user = "Tell me a story about a cat.";
    const int n = 24;
    const auto expected = run_greedy(user, n);
    auto r = server_->post("/v1/chat/completions", chat_body(user, n));
    ASSERT_EQ(r.status, 200) << r.body;
    const auto& choice = r.json["choices"][0];
    EXPECT_EQ(choice["message"]["content"], expected);
    const auto& usage = r.json["usage"];
    EXPECT_EQ(usage["prompt_tokens"], count_tokens(demo_prompt(user)));
    const auto completion = usage["completion_tokens"].get<int>();
    EXPECT_GT(completion, 0);
    EXPECT_LE(completion, n);
    EXPECT_EQ(usage["total_tokens"], usage["prompt_tokens"].get<int>() + completion);
    EXPECT_EQ(choice["finish_reason"], completion == n ? "length" : "stop") << r.body;
    EXPECT_EQ(r.json["model"], "demo");
}

TEST_F(ServeChat, StreamingEqualsNonStreamingWithUsage) {
    auto body = chat_body("What is the weather like?", 32);
    auto plain = server_->post("/v1/chat/completions", body);
    ASSERT_EQ(plain.status, 200) << plain.body;
    body["stream_options"] = {{"include_usage", true}};
    auto s = server_->stream("/v1/chat/completions", body);
    ASSERT_EQ(s.status, 200) << s.error_body;
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.content, plain.json["choices"][0]["message"]["content"]);
    EXPECT_EQ(s.finish_reason, plain.json["choices"][0]["finish_reason"]);
    ASSERT_FALSE(s.chunks.empty());
    const auto& last = s.chunks.back();
    ASSERT_TRUE(last.contains("usage") && last["usage"].is_object()) << last.dump();
    EXPECT_EQ(last["usage"]["completion_tokens"], plain.json["usage"]["completion_tokens"]);
    EXPECT_EQ(last["usage"]["prompt_tokens"], plain.json["usage"]["prompt_tokens"]);
}

TEST_F(ServeChat, MaxTokensGivesLength) {
    auto body = chat_body("Once upon a time", 3);
    body["logit_bias"] = {{"1", -100}};  // no EOS: the limit must be what ends it
    auto r = server_->post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 3);
}

TEST_F(ServeChat, StopStringEndsAndIsNotEmitted) {
    const std::string user = "Tell me a story about a dog.";
    auto full = server_->post("/v1/chat/completions", chat_body(user, 40));
    ASSERT_EQ(full.status, 200) << full.body;
    const auto text = full.json["choices"][0]["message"]["content"].get<std::string>();
    ASSERT_GT(text.size(), 16u) << "the demo reply is too short to cut: " << text;
    const std::string stop = text.substr(10, 3);
    const auto expected = text.substr(0, text.find(stop));
    auto body = chat_body(user, 40);
    body["stop"] = {stop, "never-appears-xyz"};
    auto r = server_->post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["choices"][0]["message"]["content"], expected);
    EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
    // Streaming too: the stop text never reaches the client.
    auto s = server_->stream("/v1/chat/completions", body);
    EXPECT_EQ(s.content, expected);
    EXPECT_EQ(s.finish_reason, "stop");
}

TEST_F(ServeChat, CompletionsEndpoint) {
    nlohmann::json body = {{"prompt", "The little girl"}, {"max_tokens", 8}, {"temperature", 0}};
    auto r = server_->post("/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    auto expected = run_brigade(
        {"run", "--prompt", "The little girl", "-n", "8", "--temp", "0", "--threads", "2"});
    ASSERT_EQ(expected.exit_code, 0);
    EXPECT_EQ(r.json["choices"][0]["text"].get<std::string>() + "\n", expected.out);
}

TEST_F(ServeChat, ModelNames) {
    for (const char* name : {"demo", "default_model", "", "my-alias"}) {
        auto body = chat_body("Hi", 2);
        body["model"] = name;
        auto r = server_->post("/v1/chat/completions", body);
        EXPECT_EQ(r.status, 200) << name << ": " << r.body;
    }
    auto body = chat_body("Hi", 2);
    body["model"] = "gpt-unknown";
    auto r = server_->post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 404) << r.body;
    EXPECT_EQ(r.json["error"]["code"], "model_not_found") << r.body;
    auto s = server_->stream("/v1/chat/completions", body);
    EXPECT_EQ(s.status, 404);
    EXPECT_EQ(server_->get("/health").status, 200);  // still healthy
}

TEST_F(ServeChat, BadRequests) {
    auto r = server_->post_raw("/v1/chat/completions", "{\"messages\": [");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(r.json.contains("error")) << r.body;
    // Longer than the demo's 512-token context.
    std::string long_text;
    for (int i = 0; i < 400; ++i) long_text += "the cat sat on the mat. ";
    r = server_->post("/v1/chat/completions", chat_body(long_text, 8));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json["error"]["code"], "context_length_exceeded") << r.body;
    r = server_->post("/v1/chat/completions", chat_body("Hi", 100000));
    EXPECT_EQ(r.status, 400) << r.body;
    // Server still fine.
    EXPECT_EQ(server_->post("/v1/chat/completions", chat_body("Hi", 2)).status, 200);
}

TEST_F(ServeChat, ConcurrentStreamsAreNotMixed) {
    const std::vector<std::string> users = {"Tell me about the sea.", "Where do birds live?",
                                            "Once upon a time there was a king.",
                                            "What did the little boy eat?"};
    std::vector<std::string> solo;
    for (const auto& u : users) {
        auto r = server_->post("/v1/chat/completions", chat_body(u, 48));
        ASSERT_EQ(r.status, 200) << r.body;
        solo.push_back(r.json["choices"][0]["message"]["content"]);
    }
    std::vector<StreamReply> got(users.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < users.size(); ++i) {
        threads.emplace_back(
            [&, i] { got[i] = server_->stream("/v1/chat/completions", chat_body(users[i], 48)); });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < users.size(); ++i) {
        EXPECT_EQ(got[i].status, 200) << got[i].error_body;
        EXPECT_EQ(got[i].content, solo[i]) << "stream " << i;
        EXPECT_TRUE(got[i].done);
    }
}

TEST_F(ServeChat, PrefixReuseReportsCachedTokens) {
    std::string system = "You are a helpful storyteller. ";
    for (int i = 0; i < 12; ++i) system += "Stories are short and kind and have a happy end. ";
    auto body = [&](const std::string& user) {
        nlohmann::json b = chat_body(user, 16);
        b["messages"] = {{{"role", "system"}, {"content", system}},
                         {{"role", "user"}, {"content", user}}};
        return b;
    };
    auto first = server_->post("/v1/chat/completions", body("Tell me about a fox."));
    ASSERT_EQ(first.status, 200) << first.body;
    auto again = server_->post("/v1/chat/completions", body("Tell me about a fox."));
    ASSERT_EQ(again.status, 200) << again.body;
    const auto prompt_tokens = again.json["usage"]["prompt_tokens"].get<int>();
    const auto cached = again.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    EXPECT_GT(cached, 100);
    EXPECT_LT(cached, prompt_tokens);
    EXPECT_EQ(again.json["choices"][0]["message"]["content"],
              first.json["choices"][0]["message"]["content"]);
    // Another question after the same system prompt reuses the shared part.
    auto other = server_->post("/v1/chat/completions", body("Tell me about an owl."));
    ASSERT_EQ(other.status, 200) << other.body;
    EXPECT_GT(other.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 100);
    // ... and gives what a cold server would: compare with `brigade run`.
    nlohmann::json msgs = body("Tell me about an owl.")["messages"];
    const std::string rendered = "<|bos|><|system|>\n" + system + "<|end|>\n<|user|>\n" +
                                 "Tell me about an owl.<|end|>\n<|assistant|>\n";
    auto run = run_brigade({"run", "--prompt", rendered, "-n", "16", "--temp", "0"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(other.json["choices"][0]["message"]["content"].get<std::string>() + "\n", run.out);
}

TEST_F(ServeChat, JsonObjectResponseFormatIsValidJson) {
    auto body = chat_body("Give me a JSON object describing a cat.", 60);
    body["response_format"] = {{"type", "json_object"}};
    auto r = server_->post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const auto text = r.json["choices"][0]["message"]["content"].get<std::string>();
    if (r.json["choices"][0]["finish_reason"] == "stop") {
        auto parsed = nlohmann::json::parse(text, nullptr, false);
        EXPECT_TRUE(parsed.is_object()) << text;
    } else {
        EXPECT_EQ(text.find_first_not_of(" \n\t"), text.find('{')) << text;
    }
}

TEST_F(ServeChat, Logprobs) {
    auto body = chat_body("Hello there", 4);
    body["logprobs"] = true;
    body["top_logprobs"] = 3;
    auto r = server_->post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const auto& content = r.json["choices"][0]["logprobs"]["content"];
    ASSERT_TRUE(content.is_array()) << r.body;
    ASSERT_FALSE(content.empty());
    for (const auto& t : content) {
        ASSERT_EQ(t["top_logprobs"].size(), 3u);
        // Greedy: the chosen token is the most likely one.
        EXPECT_FLOAT_EQ(t["logprob"].get<float>(), t["top_logprobs"][0]["logprob"].get<float>());
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
    }
}

TEST_F(ServeChat, ClientDisconnectFreesTheSlot) {
    auto body = chat_body("Tell me a very long story.", 400);
    body["logit_bias"] = {{"1", -100}};
    auto s = server_->stream("/v1/chat/completions", body,
                             [](const StreamReply& so_far) { return so_far.chunks.size() < 3; });
    EXPECT_FALSE(s.done);
    // The log says the generation was cancelled well before its 400 tokens.
    bool cancelled = false;
    for (int i = 0; i < 100 && !cancelled; ++i) {
        cancelled = server_->log().find("cancelled by the client") != std::string::npos;
        if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(cancelled) << server_->log();
    EXPECT_EQ(server_->post("/v1/chat/completions", chat_body("Hi", 4)).status, 200);
}

TEST_F(ServeChat, ChatCommandWithPipedInput) {
    // A question the demo model answers and then ends its turn (PyTorch's greedy reply reaches
    // <|end|>), so the second turn still fits in the 512-token context.
    const auto ref = nlohmann::json::parse(read_file(source_dir() / "model/demo/reference.json"));
    std::string user;
    for (const auto& g : ref["greedy"]["bf16"]) {
        if (g["kind"] == "chat" && !g["first_end_index"].is_null()) {
            user = g["messages"][0]["content"].get<std::string>();
            break;
        }
    }
    ASSERT_FALSE(user.empty()) << "no chat reference that ends by itself";
    auto no_limit = chat_body(user, 1);
    no_limit.erase("max_tokens");  // as `brigade chat` sends it
    auto r = server_->post("/v1/chat/completions", no_limit);
    ASSERT_EQ(r.status, 200) << r.body;
    const auto reply = r.json["choices"][0]["message"]["content"].get<std::string>();
    TempDir dir;
    write_file(dir.path() / "in.txt", user + "\nAnd then?\n/exit\nnot sent\n");
    const std::string cmd = brigade_binary().string() + " chat --url " + server_->base_url() +
                            " --temp 0 < " + (dir.path() / "in.txt").string() + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << out;
    // The first turn's reply is exactly the API's; a second turn follows it.
    ASSERT_EQ(out.rfind(reply + "\n", 0), 0u) << out;
    EXPECT_GT(out.size(), reply.size() + 2) << out;
    EXPECT_EQ(out.find("brigade chat:"), std::string::npos) << out;
}

TEST(ServeOptions, ApiKeyIsRequired) {
    ServeProcess server({"--api-key", "s3cret", "--temp", "0"});
    ASSERT_TRUE(server.ready()) << server.log();
    auto r = server.post("/v1/chat/completions", chat_body("Hi", 2));
    EXPECT_EQ(r.status, 401) << r.body;
    r = server.post("/v1/chat/completions", chat_body("Hi", 2), "wrong");
    EXPECT_EQ(r.status, 401) << r.body;
    r = server.post("/v1/chat/completions", chat_body("Hi", 2), "s3cret");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(server.terminate(), 0) << server.log();
}

TEST(ServeOptions, OverCapacityGets429) {
    ServeProcess server({"--max-concurrency", "1", "--max-queue", "1", "--temp", "0"});
    ASSERT_TRUE(server.ready()) << server.log();
    nlohmann::json body = {
        {"prompt", "Once upon a time"}, {"max_tokens", 450}, {"logit_bias", {{"1", -100}}}};
    std::vector<int> status(5);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < status.size(); ++i) {
        threads.emplace_back([&, i] { status[i] = server.post("/v1/completions", body).status; });
    }
    for (auto& t : threads) t.join();
    int ok = 0, busy = 0;
    for (int s : status) {
        ok += s == 200;
        busy += s == 429;
    }
    EXPECT_EQ(ok + busy, 5) << server.log();
    EXPECT_GE(ok, 2);  // the running one and the queued one
    EXPECT_GE(busy, 1) << server.log();
    EXPECT_EQ(server.post("/v1/completions", body).status, 200);  // capacity is back
    EXPECT_EQ(server.terminate(), 0) << server.log();
}

TEST(ServeOptions, HelpIsReadable) {
    auto r = run_brigade({"serve", "--help"});
    EXPECT_EQ(r.exit_code, 0);
    for (const char* opt : {"--model", "--host", "--port", "--api-key", "--alias",
                            "--max-concurrency", "--ctx", "--threads", "--backend", "--temp"}) {
        EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
    }
    r = run_brigade({"chat", "--help"});
    EXPECT_EQ(r.exit_code, 0);
    for (const char* opt : {"--url", "--system", "--model", "--api-key"}) {
        EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
    }
}

TEST(ServeOptions, BusyPortIsAClearError) {
    ServeProcess first({});
    ASSERT_TRUE(first.ready());
    auto r = run_brigade({"serve", "--port", first.url().port, "--threads", "1"}, 60);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("cannot listen"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace brigade::test
