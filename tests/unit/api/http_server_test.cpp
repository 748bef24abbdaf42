// The Beast server end to end over loopback, against a scripted fake service.

#include "api/http_server.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/sse.hpp"
#include "tests/unit/api/fake_completion_service.hpp"

namespace brigade::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using namespace std::chrono_literals;

struct Reply {
    int status = 0;
    http::fields headers;
    std::string body;
    json json_body() const { return json::parse(body, nullptr, false); }
};

// A blocking loopback client with a receive timeout, so that a server bug fails the test
// instead of hanging it.
class Client {
public:
    explicit Client(std::uint16_t port) : socket_(io_) {
        socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
        timeval timeout{10, 0};
        ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    }

    void send(http::verb method, const std::string& target, const std::string& body = "",
              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
        http::request<http::string_body> request{method, target, 11};
        request.set(http::field::host, "127.0.0.1");
        request.set(http::field::content_type, "application/json");
        for (const auto& [name, value] : headers) request.set(name, value);
        request.body() = body;
        request.prepare_payload();
        http::write(socket_, request);
    }

    Reply receive() {
        http::response<http::string_body> response;
        http::read(socket_, buffer_, response);
        Reply reply;
        reply.status = response.result_int();
        reply.body = response.body();
        reply.headers = response.base();
        return reply;
    }

    Reply call(http::verb method, const std::string& target, const std::string& body = "",
               const std::vector<std::pair<std::string, std::string>>& headers = {}) {
        send(method, target, body, headers);
        return receive();
    }

    // Reads raw bytes until `needle` shows up (or the timeout).
    std::string read_until(const std::string& needle) {
        std::string seen;
        char chunk[4096];
        while (seen.find(needle) == std::string::npos) {
            beast::error_code ec;
            const std::size_t n = socket_.read_some(net::buffer(chunk), ec);
            if (ec) break;
            seen.append(chunk, n);
        }
        return seen;
    }

    void send_raw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }

    void close() {
        beast::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
    }

private:
    net::io_context io_;
    tcp::socket socket_;
    beast::flat_buffer buffer_;
};

std::vector<json> sse_chunks(const std::string& body, bool* done = nullptr,
                             int* comments = nullptr) {
    SseParser parser;
    std::vector<SseMessage> messages;
    parser.feed(body, messages);
    std::vector<json> chunks;
    if (done != nullptr) *done = false;
    for (const auto& m : messages) {
        if (m.comment) {
            if (comments != nullptr) ++*comments;
            continue;
        }
        if (m.data == "[DONE]") {
            if (done != nullptr) *done = true;
            continue;
        }
        chunks.push_back(json::parse(m.data));
    }
    return chunks;
}

std::string streamed_content(const std::vector<json>& chunks) {
    std::string text;
    for (const auto& c : chunks) {
        if (c.contains("choices") && !c["choices"].empty() &&
            c["choices"][0]["delta"].contains("content")) {
            text += c["choices"][0]["delta"]["content"].get<std::string>();
        }
    }
    return text;
}

std::string chat_body(const std::string& prompt, json extra = json::object()) {
    json body = {{"model", "fake"}, {"messages", {{{"role", "user"}, {"content", prompt}}}}};
    body.update(extra);
    return body.dump();
}

class HttpServerTest : public ::testing::Test {
protected:
    void start(ServerOptions options = {}) {
        options.host = "127.0.0.1";
        options.port = 0;
        options.log = [this](LogLevel, std::string_view line) {
            if (std::getenv("BRIGADE_TEST_VERBOSE") != nullptr) {
                std::fprintf(stderr, "[server] %.*s\n", static_cast<int>(line.size()), line.data());
            }
            std::lock_guard lock(log_mutex_);
            log_.emplace_back(line);
        };
        server_ = std::make_unique<HttpServer>(io_, service_, std::move(options));
        auto port = server_->start();
        ASSERT_TRUE(port) << port.error().message();
        port_ = *port;
        for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
    }

    void TearDown() override {
        if (server_) server_->stop();
        for (auto& t : threads_) t.join();
        service_.join();
        server_.reset();
    }

    bool logged(const std::string& needle) {
        std::lock_guard lock(log_mutex_);
        for (const auto& line : log_) {
            if (line.find(needle) != std::string::npos) return true;
        }
        return false;
    }

    std::string log_text() {
        std::lock_guard lock(log_mutex_);
        std::string text;
        for (const auto& line : log_) text += line + "\n";
        return text;
    }

    // Polls until `predicate` or 5 s.
    template <class Predicate>
    static bool eventually(Predicate predicate) {
        for (int i = 0; i < 500; ++i) {
            if (predicate()) return true;
            std::this_thread::sleep_for(10ms);
        }
        return predicate();
    }

    test::FakeCompletionService service_;
    net::io_context io_;
    std::unique_ptr<HttpServer> server_;
    std::vector<std::thread> threads_;
    std::uint16_t port_ = 0;
    std::mutex log_mutex_;
    std::vector<std::string> log_;
};

TEST_F(HttpServerTest, RawHttp10Request) {
    start();
    Client client(port_);
    client.send_raw("GET /health HTTP/1.0\r\n\r\n");
    const std::string reply = client.read_until("\"ok\"}");
    EXPECT_TRUE(reply.starts_with("HTTP/1.0 200 OK\r\n")) << reply;
    EXPECT_TRUE(reply.ends_with("{\"status\":\"ok\"}")) << reply;
}

TEST_F(HttpServerTest, HealthAndModels) {
    start();
    Client client(port_);
    const Reply health = client.call(http::verb::get, "/health");
    EXPECT_EQ(health.status, 200);
    EXPECT_EQ(health.json_body(), json({{"status", "ok"}}));
    EXPECT_EQ(health.headers["Access-Control-Allow-Origin"], "*");
    // Same connection (keep-alive).
    const Reply models = client.call(http::verb::get, "/v1/models");
    ASSERT_EQ(models.status, 200);
    const json list = models.json_body();
    EXPECT_EQ(list["object"], "list");
    std::vector<std::string> ids;
    for (const auto& m : list["data"]) {
        ids.push_back(m["id"]);
        EXPECT_EQ(m["object"], "model");
        EXPECT_EQ(m["owned_by"], "brigade");
    }
    EXPECT_EQ(ids, (std::vector<std::string>{"fake-model", "fake"}));
}

TEST_F(HttpServerTest, NonStreamChat) {
    start();
    Client client(port_);
    const Reply reply =
        client.call(http::verb::post, "/v1/chat/completions", chat_body("echo hello world"));
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json body = reply.json_body();
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["model"], "fake-model");
    EXPECT_TRUE(std::string(body["id"]).starts_with("chatcmpl-"));
    EXPECT_EQ(reply.headers["X-Request-Id"], body["id"].get<std::string>());
    EXPECT_EQ(body["choices"][0]["message"]["content"], "Echo: hello world");
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(body["usage"]["prompt_tokens"], 16);
    EXPECT_EQ(body["usage"]["completion_tokens"], 6);
    EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
    EXPECT_TRUE(eventually([&] { return logged("prompt=16 cached=8 prefill="); }));
    // The route without /v1 answers too.
    EXPECT_EQ(client.call(http::verb::post, "/chat/completions", chat_body("echo x")).status, 200);
}

TEST_F(HttpServerTest, StreamChatWithUsage) {
    start();
    Client client(port_);
    const Reply reply =
        client.call(http::verb::post, "/v1/chat/completions",
                    chat_body("echo streaming works",
                              {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
    ASSERT_EQ(reply.status, 200);
    EXPECT_EQ(reply.headers[http::field::content_type], "text/event-stream");
    bool done = false;
    const auto chunks = sse_chunks(reply.body, &done);
    EXPECT_TRUE(done);
    ASSERT_GE(chunks.size(), 4u);
    EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(streamed_content(chunks), "Echo: streaming works");
    const json& last = chunks.back();
    EXPECT_EQ(last["choices"], json::array());
    EXPECT_EQ(last["usage"]["completion_tokens"], 7);
    EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
    // Keep-alive after a chunked stream.
    EXPECT_EQ(client.call(http::verb::get, "/health").status, 200);
}

TEST_F(HttpServerTest, StopStringSplitAcrossTokens) {
    start();
    Client client(port_);
    // "Echo: hello world" in 3-byte tokens: "Ech" "o: " "hel" "lo " "wor" "ld"; "lo w" spans two.
    const Reply reply = client.call(http::verb::post, "/v1/chat/completions",
                                    chat_body("echo hello world", {{"stop", "lo w"}}));
    ASSERT_EQ(reply.status, 200);
    EXPECT_EQ(reply.json_body()["choices"][0]["message"]["content"], "Echo: hel");
    const Reply stream = client.call(
        http::verb::post, "/v1/chat/completions",
        chat_body("echo hello world", {{"stop", json::array({"lo w"})}, {"stream", true}}));
    EXPECT_EQ(streamed_content(sse_chunks(stream.body)), "Echo: hel");
}

TEST_F(HttpServerTest, ToolCallStreamAndNonStream) {
    start();
    Client client(port_);
    const json tools = json::parse(
        R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])");
    const Reply reply = client.call(http::verb::post, "/v1/chat/completions",
                                    chat_body("tool", {{"tools", tools}}));
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json choice = reply.json_body()["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(
        json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
        json({{"city", "Paris"}}));

    const Reply stream = client.call(http::verb::post, "/v1/chat/completions",
                                     chat_body("tool", {{"tools", tools}, {"stream", true}}));
    std::string name, arguments;
    std::string finish;
    for (const auto& chunk : sse_chunks(stream.body)) {
        const json& c = chunk["choices"][0];
        if (c["delta"].contains("tool_calls")) {
            const json& call = c["delta"]["tool_calls"][0];
            EXPECT_EQ(call["index"], 0);
            if (call.contains("id")) name = call["function"]["name"];
            arguments += call["function"]["arguments"].get<std::string>();
        }
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}}));
    EXPECT_EQ(finish, "tool_calls");
}

TEST_F(HttpServerTest, EngineErrorIs500WithRequestId) {
    start();
    Client client(port_);
    for (bool stream : {false, true}) {
        // Before any output, streamed or not: a plain 500 with an OpenAI error object that names
        // the request.
        const Reply reply = client.call(http::verb::post, "/v1/chat/completions",
                                        chat_body("engine error", {{"stream", stream}}));
        EXPECT_EQ(reply.status, 500) << reply.body;
        EXPECT_EQ(reply.headers[http::field::content_type], "application/json");
        const json error = reply.json_body()["error"];
        EXPECT_EQ(error["type"], "server_error");
        EXPECT_EQ(error["code"], "internal_error");
        const std::string id = std::string(reply.headers["X-Request-Id"]);
        EXPECT_TRUE(id.starts_with("chatcmpl-")) << id;
        EXPECT_NE(
            error["message"].get<std::string>().find("injected fault (request id " + id + ")"),
            std::string::npos)
            << reply.body;
    }
    // After output began, a stream ends with an error event; the connection stays usable.
    const Reply late = client.call(http::verb::post, "/v1/chat/completions",
                                   chat_body("engine error later", {{"stream", true}}));
    ASSERT_EQ(late.status, 200);
    const auto chunks = sse_chunks(late.body);
    EXPECT_EQ(streamed_content(chunks), "partial");
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(chunks.back()["error"]["code"], "internal_error") << late.body;
    EXPECT_TRUE(eventually([&] { return logged("error=internal"); }));
    EXPECT_EQ(client.call(http::verb::post, "/v1/chat/completions", chat_body("echo ok")).status,
              200);
    EXPECT_TRUE(eventually([&] { return server_->active_completions() == 0; }));
}

TEST_F(HttpServerTest, TextCompletions) {
    start();
    Client client(port_);
    const Reply reply = client.call(http::verb::post, "/v1/completions",
                                    json({{"model", "fake-model"}, {"prompt", "echo abc"}}).dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.json_body()["object"], "text_completion");
    EXPECT_EQ(reply.json_body()["choices"][0]["text"], "Echo: abc");
    EXPECT_TRUE(reply.json_body()["id"].get<std::string>().starts_with("cmpl-"));
    const Reply stream =
        client.call(http::verb::post, "/v1/completions",
                    json({{"prompt", "echo abc"}, {"stream", true}, {"max_tokens", 2}}).dump());
    std::string text;
    std::string finish;
    for (const auto& chunk : sse_chunks(stream.body)) {
        text += chunk["choices"][0]["text"].get<std::string>();
        if (!chunk["choices"][0]["finish_reason"].is_null())
            finish = chunk["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(text, "Echo: ");
    EXPECT_EQ(finish, "length");
}

TEST_F(HttpServerTest, ApiKey) {
    ServerOptions options;
    options.api_key = "s3cret";
    start(options);
    Client client(port_);
    const std::string body = chat_body("echo x");
    const Reply missing = client.call(http::verb::post, "/v1/chat/completions", body);
    EXPECT_EQ(missing.status, 401);
    EXPECT_EQ(missing.json_body()["error"]["code"], "invalid_api_key");
    const Reply wrong = client.call(http::verb::post, "/v1/chat/completions", body,
                                    {{"Authorization", "Bearer nope"}});
    EXPECT_EQ(wrong.status, 401);
    EXPECT_EQ(
        client.call(http::verb::get, "/v1/models", "", {{"Authorization", "Bearer nope"}}).status,
        401);
    EXPECT_EQ(client
                  .call(http::verb::post, "/v1/chat/completions", body,
                        {{"Authorization", "Bearer s3cret"}})
                  .status,
              200);
    EXPECT_EQ(client.call(http::verb::get, "/health").status, 200) << "health needs no key";
    EXPECT_EQ(service_.started(), 1) << "unauthorized requests never reach the service";
}

TEST_F(HttpServerTest, UnknownModelIs404AndServerStaysHealthy) {
    start();
    Client client(port_);
    for (bool stream : {false, true}) {
        const Reply reply =
            client.call(http::verb::post, "/v1/chat/completions",
                        json({{"model", "gpt-9"},
                              {"stream", stream},
                              {"messages", {{{"role", "user"}, {"content", "hi"}}}}})
                            .dump());
        EXPECT_EQ(reply.status, 404);
        const json error = reply.json_body()["error"];
        EXPECT_EQ(error["code"], "model_not_found");
        EXPECT_EQ(error["param"], "model");
    }
    EXPECT_EQ(client.call(http::verb::get, "/health").status, 200);
    EXPECT_EQ(client.call(http::verb::post, "/v1/chat/completions", chat_body("echo ok")).status,
              200);
}

TEST_F(HttpServerTest, ClientErrors) {
    ServerOptions options;
    options.max_body_bytes = 4096;
    start(options);
    {
        Client client(port_);
        const Reply malformed =
            client.call(http::verb::post, "/v1/chat/completions", "{\"model\":");
        EXPECT_EQ(malformed.status, 400);
        EXPECT_EQ(malformed.json_body()["error"]["code"], "invalid_json");
        const Reply utf8 = client.call(http::verb::post, "/v1/chat/completions",
                                       chat_body("x").replace(5, 1, "\xff"));
        EXPECT_EQ(utf8.status, 400);
        EXPECT_NE(utf8.json_body()["error"]["message"].get<std::string>().find("UTF-8"),
                  std::string::npos);
        const Reply invalid =
            client.call(http::verb::post, "/v1/chat/completions", chat_body("x", {{"n", 3}}));
        EXPECT_EQ(invalid.status, 400);
        EXPECT_EQ(invalid.json_body()["error"]["param"], "n");
        const Reply huge = client.call(http::verb::post, "/v1/chat/completions",
                                       chat_body("x", {{"max_tokens", 1e12}}));
        EXPECT_EQ(huge.status, 400);
        EXPECT_EQ(huge.json_body()["error"]["param"], "max_tokens");
        const Reply route = client.call(http::verb::get, "/v1/nothing");
        EXPECT_EQ(route.status, 404);
        EXPECT_EQ(route.json_body()["error"]["type"], "not_found_error");
        const Reply method = client.call(http::verb::get, "/v1/chat/completions");
        EXPECT_EQ(method.status, 405);
        const Reply context =
            client.call(http::verb::post, "/v1/chat/completions", chat_body("too long"));
        EXPECT_EQ(context.status, 400);
        EXPECT_EQ(context.json_body()["error"]["code"], "context_length_exceeded");
    }
    {
        Client client(port_);
        const Reply big = client.call(http::verb::post, "/v1/chat/completions",
                                      chat_body(std::string(10000, 'a')));
        EXPECT_EQ(big.status, 413);
        EXPECT_EQ(big.json_body()["error"]["code"], "payload_too_large");
    }
    Client after(port_);
    EXPECT_EQ(after.call(http::verb::get, "/health").status, 200);
}

TEST_F(HttpServerTest, CorsPreflight) {
    start();
    Client client(port_);
    const Reply reply = client.call(http::verb::options, "/v1/chat/completions", "",
                                    {{"Origin", "http://localhost:3000"},
                                     {"Access-Control-Request-Method", "POST"},
                                     {"Access-Control-Request-Headers", "authorization"}});
    EXPECT_EQ(reply.status, 204);
    EXPECT_EQ(reply.headers["Access-Control-Allow-Origin"], "*");
    EXPECT_NE(std::string(reply.headers["Access-Control-Allow-Methods"]).find("POST"),
              std::string::npos);
    EXPECT_NE(std::string(reply.headers["Access-Control-Allow-Headers"]).find("Authorization"),
              std::string::npos);
}

TEST_F(HttpServerTest, QueueFullGives429) {
    ServerOptions options;
    options.max_concurrency = 1;
    start(options);
    Client slow(port_);
    slow.send(http::verb::post, "/v1/chat/completions", chat_body("slow", {{"stream", true}}));
    ASSERT_NE(slow.read_until("xxx").find("xxx"), std::string::npos);
    Client second(port_);
    const Reply busy = second.call(http::verb::post, "/v1/chat/completions", chat_body("echo hi"));
    EXPECT_EQ(busy.status, 429);
    EXPECT_EQ(busy.json_body()["error"]["type"], "rate_limit_error");
    slow.close();
    EXPECT_TRUE(service_.wait_cancelled(1, 5s));
    EXPECT_TRUE(eventually([&] { return server_->active_completions() == 0; }));
    EXPECT_EQ(second.call(http::verb::post, "/v1/chat/completions", chat_body("echo hi")).status,
              200);
    // The service's own "queue full" maps to 429 too.
    service_.reject_overloaded = true;
    EXPECT_EQ(second.call(http::verb::post, "/v1/chat/completions", chat_body("echo hi")).status,
              429);
}

TEST_F(HttpServerTest, DisconnectMidStreamCancelsGeneration) {
    start();
    for (bool stream : {true, false}) {
        Client client(port_);
        client.send(http::verb::post, "/v1/chat/completions",
                    chat_body("slow", {{"stream", stream}}));
        if (stream) {
            ASSERT_NE(client.read_until("xxx").find("xxx"), std::string::npos);
        } else {
            std::this_thread::sleep_for(100ms);  // generating, nothing sent yet
        }
        client.close();
    }
    EXPECT_TRUE(service_.wait_cancelled(2, 5s)) << "cancelled: " << service_.cancelled();
    EXPECT_TRUE(eventually([&] { return server_->active_completions() == 0; }));
    EXPECT_TRUE(eventually([&] { return logged("abandoned=client disconnected"); }));
}

TEST_F(HttpServerTest, SlowReaderIsDroppedNotBuffered) {
    ServerOptions options;
    options.max_pending_stream_bytes = 256 << 10;
    start(options);
    Client client(port_);
    client.send(http::verb::post, "/v1/chat/completions", chat_body("flood", {{"stream", true}}));
    // Read nothing: once the socket buffers are full, unread output piles up in the server
    // until the bound, then the request is cancelled.
    EXPECT_TRUE(service_.wait_cancelled(1, 10s));
    EXPECT_TRUE(eventually([&] { return logged("abandoned=client too slow"); })) << log_text();
    EXPECT_TRUE(eventually([&] { return server_->active_completions() == 0; }));
}

TEST_F(HttpServerTest, ConcurrentStreamsAreNotMixed) {
    start();
    constexpr int kClients = 6;
    std::vector<std::future<std::string>> results;
    for (int i = 0; i < kClients; ++i) {
        results.push_back(std::async(std::launch::async, [this, i] {
            Client client(port_);
            const std::string word(30, static_cast<char>('a' + i));
            const Reply reply = client.call(http::verb::post, "/v1/chat/completions",
                                            chat_body("echo " + word, {{"stream", true}}));
            return streamed_content(sse_chunks(reply.body));
        }));
    }
    for (int i = 0; i < kClients; ++i) {
        EXPECT_EQ(results[i].get(), "Echo: " + std::string(30, static_cast<char>('a' + i)));
    }
}

TEST_F(HttpServerTest, KeepAliveCommentsDuringLongPrompt) {
    ServerOptions options;
    options.sse_keepalive = 50ms;
    start(options);
    Client client(port_);
    const Reply reply = client.call(http::verb::post, "/v1/chat/completions",
                                    chat_body("pause", {{"stream", true}}));
    int comments = 0;
    bool done = false;
    const auto chunks = sse_chunks(reply.body, &done, &comments);
    EXPECT_TRUE(done);
    EXPECT_GE(comments, 2);
    EXPECT_EQ(streamed_content(chunks), "ok");
}

TEST_F(HttpServerTest, StopClosesConnectionsAndCancels) {
    start();
    Client client(port_);
    client.send(http::verb::post, "/v1/chat/completions", chat_body("slow", {{"stream", true}}));
    ASSERT_NE(client.read_until("xxx").find("xxx"), std::string::npos);
    server_->stop();
    EXPECT_TRUE(service_.wait_cancelled(1, 5s));
    for (auto& t : threads_) t.join();  // io_context runs out of work once all is closed
    threads_.clear();
}

}  // namespace
}  // namespace brigade::api
