#pragma once
// The OpenAI-compatible HTTP server: a Boost.Beast driver around `Router` and
// `CompletionExchange`. Beast stays inside http_server.cpp so that including this header costs
// nothing (Beast compiles slowly).
//
// Threads: the server runs on the `io_context` the node owns (one or more threads may run it;
// each connection lives on its own strand). Service events arrive on compute threads and are
// posted to the connection's strand. Destroy the server (or call `stop()` and let the io_context
// drain) before the io_context, and keep the service alive until the server is gone.

#include <boost/system/result.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "api/completion_service.hpp"
#include "api/openai_types.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace brigade::api {

enum class LogLevel { debug, info, warn, error };

// Only node/ configures spdlog (house guide §4); the server logs through this.
using LogSink = std::function<void(LogLevel level, std::string_view line)>;

struct ServerOptions {
    std::string host = "127.0.0.1";
    std::uint16_t port = 8177;  // 0: any free port (tests)
    std::string api_key;        // empty: no authentication
    std::string cors_origin = "*";
    std::size_t max_body_bytes = std::size_t{16} << 20;  // larger → 413
    std::size_t max_header_bytes = std::size_t{64} << 10;
    // Reading one request (including the keep-alive wait before it) and writing one piece of a
    // response each get this long; a client slower than that is dropped.
    std::chrono::milliseconds read_timeout{60'000};
    std::chrono::milliseconds write_timeout{60'000};
    // With nothing else to send, a streaming response gets a `: keep-alive` comment this often.
    std::chrono::milliseconds sse_keepalive{10'000};
    // Completions in flight through this server; more get 429. 0: unlimited (the service may
    // still answer `overloaded`).
    std::size_t max_concurrency = 0;
    // Response bytes a slow streaming client may leave unread before it is dropped (and its
    // generation cancelled), instead of buffering without bound.
    std::size_t max_pending_stream_bytes = std::size_t{8} << 20;
    std::size_t max_connections = 1024;
    RequestLimits limits;
    LogSink log;
};

class HttpServer {
public:
    HttpServer(boost::asio::io_context& io, CompletionService& service, ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds and starts accepting. Returns the bound port (useful with port 0).
    boost::system::result<std::uint16_t> start();

    // Thread-safe and idempotent: stops accepting, closes idle connections, cancels the
    // generations in flight (their clients get their connection closed). To drain gracefully,
    // wait for `active_completions()` to reach 0 before calling it.
    void stop();

    std::size_t active_completions() const;
    std::size_t open_connections() const;

    struct Impl;  // defined in http_server.cpp (keeps Beast out of this header)

private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace brigade::api
