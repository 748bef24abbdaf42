// The only translation unit of brigade_api that includes Beast (it compiles slowly): the
// listener, one coroutine per connection, and the sink that carries service events from compute
// threads onto the connection's strand. Protocol decisions live in `Router` and
// `CompletionExchange`; this file only moves bytes and enforces limits and timeouts.

#include "api/http_server.hpp"

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "api/completion_exchange.hpp"
#include "api/errors.hpp"
#include "api/router.hpp"
#include "api/sse.hpp"

namespace brigade::api {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr auto kUseTuple = net::as_tuple(net::use_awaitable);
// Bytes read while watching a streaming client for a disconnect; pipelined requests beyond
// this wait in the kernel until the current response is done.
constexpr std::size_t kWatchReadBytes = 4096;
// After a 413 we read and discard what the client is still sending (up to this much, for up to
// kLingerTime) so that it sees our answer instead of a connection reset.
constexpr std::size_t kLingerBytes = std::size_t{8} << 20;
constexpr std::chrono::seconds kLingerTime{2};

std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

}  // namespace

class Session;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
    Impl(net::io_context& io_context, CompletionService& completion_service,
         ServerOptions server_options)
        : io(io_context),
          service(completion_service),
          options(std::move(server_options)),
          router(RouterOptions{options.api_key, options.cors_origin, options.limits}, service),
          ids(std::random_device{}()),
          acceptor(net::make_strand(io_context)) {}

    void log(LogLevel level, std::string_view line) const {
        if (options.log) options.log(level, line);
    }

    net::awaitable<void> accept_loop();
    void add_session(const std::shared_ptr<Session>& session);
    void stop();

    net::io_context& io;
    CompletionService& service;
    ServerOptions options;
    Router router;
    RequestIdGenerator ids;
    tcp::acceptor acceptor;
    std::atomic<bool> stopping{false};
    std::atomic<std::size_t> active{0};
    std::atomic<std::size_t> connections{0};
    std::mutex sessions_mutex;
    std::vector<std::weak_ptr<Session>> sessions;
};

// One HTTP connection: reads requests one after another (keep-alive) and answers each.
class Session : public std::enable_shared_from_this<Session> {
public:
    Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket)
        : server_(std::move(server)), stream_(std::move(socket)), wake_(stream_.get_executor()) {
        ++server_->connections;
    }
    ~Session() { --server_->connections; }

    net::any_io_executor executor() { return stream_.get_executor(); }

    net::awaitable<void> run();

    // Any thread: cancel what is in flight and close.
    void shutdown() {
        net::post(stream_.get_executor(), [self = shared_from_this()] {
            self->stopping_ = true;
            if (self->cancel_) self->cancel_->cancel();
            self->wake_.cancel();
            beast::error_code ignored;
            self->stream_.socket().close(ignored);
        });
    }

    // On the strand: one service event of exchange `serial`.
    void deliver(std::uint64_t serial, ServiceEvent event);

private:
    net::awaitable<bool> handle(http::request<http::string_body>& request);
    net::awaitable<bool> write_simple(const SimpleResponse& response, unsigned version,
                                      bool keep_alive, const std::string& request_id,
                                      bool head_only = false);
    // By reference: GCC 12 mis-destroys by-value coroutine parameters holding short strings
    // (see mesh/tcp_transport.cpp); the request lives in the caller's frame.
    net::awaitable<bool> serve_completion(CompletionRequest& request, unsigned version,
                                          bool keep_alive);
    net::awaitable<void> on_read_error(beast::error_code ec, bool got_some, unsigned version);
    net::awaitable<void> linger_close();
    net::awaitable<void> wait_woken(Clock::time_point until);
    void start_watch();
    void apply_common_headers(http::fields& fields, const std::string& request_id) const;

    std::shared_ptr<HttpServer::Impl> server_;
    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    net::steady_timer wake_;  // wakes the writer when events arrive (cancel = notify)
    bool stopping_ = false;

    // The completion in flight on this connection (all touched on the strand only).
    std::uint64_t serial_ = 0;
    std::optional<CompletionExchange> exchange_;
    std::optional<SseOutbox> outbox_;
    std::optional<ResponseHead> pending_head_;
    std::string full_body_;  // a non-streamed response's body
    std::shared_ptr<Cancellation> cancel_;
    bool exchange_done_ = false;
    bool too_slow_ = false;
    bool client_gone_ = false;
    bool watching_ = false;
};

namespace {

// Carries events from the service's threads to the session's strand. Holds the session weakly:
// a closed connection's late events are dropped.
class PostingSink final : public CompletionSink {
public:
    PostingSink(std::weak_ptr<Session> session, net::any_io_executor executor, std::uint64_t serial)
        : session_(std::move(session)), executor_(std::move(executor)), serial_(serial) {}

    void on_prompt(const PromptInfo& info) override { post(info); }
    void on_progress(const PrefillProgress& progress) override { post(progress); }
    void on_delta(Delta delta) override { post(std::move(delta)); }
    void on_final(const Final& final) override { post(final); }
    void on_error(ServiceError error) override { post(std::move(error)); }

private:
    void post(ServiceEvent event) {
        net::post(executor_,
                  [session = session_, serial = serial_, event = std::move(event)]() mutable {
                      if (auto s = session.lock()) s->deliver(serial, std::move(event));
                  });
    }

    std::weak_ptr<Session> session_;
    net::any_io_executor executor_;
    std::uint64_t serial_;
};

}  // namespace

void Session::apply_common_headers(http::fields& fields, const std::string& request_id) const {
    fields.set(http::field::server, "brigade");
    fields.set("X-Request-Id", request_id);
    for (const auto& [name, value] : server_->router.cors_headers()) fields.set(name, value);
}

net::awaitable<void> Session::run() {
    const ServerOptions& options = server_->options;
    while (!stopping_ && !server_->stopping) {
        http::request_parser<http::string_body> parser;
        parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
        parser.body_limit(options.max_body_bytes);
        stream_.expires_after(options.read_timeout);
        auto [ec, n] = co_await http::async_read_header(stream_, buffer_, parser, kUseTuple);
        // curl and others wait for "100 Continue" before sending a large body.
        if (!ec && !parser.is_done() &&
            iequals(parser.get()[http::field::expect], "100-continue")) {
            http::response<http::empty_body> proceed{http::status::continue_,
                                                     parser.get().version()};
            stream_.expires_after(options.write_timeout);
            std::tie(ec, n) = co_await http::async_write(stream_, proceed, kUseTuple);
        }
        if (!ec && !parser.is_done()) {
            stream_.expires_after(options.read_timeout);
            std::tie(ec, n) = co_await http::async_read(stream_, buffer_, parser, kUseTuple);
        }
        if (ec) {
            const unsigned version = parser.is_header_done() ? parser.get().version() : 11;
            co_await on_read_error(ec, parser.got_some(), version);
            break;
        }
        http::request<http::string_body> request = parser.release();
        if (!co_await handle(request)) break;
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
}

net::awaitable<void> Session::on_read_error(beast::error_code ec, bool got_some, unsigned version) {
    const std::string id = server_->ids.next("req");
    std::optional<ServiceError> error;
    if (ec == http::error::body_limit) {
        error = make_api_error(ErrorKind::payload_too_large,
                               "request body is larger than " +
                                   std::to_string(server_->options.max_body_bytes) + " bytes");
    } else if (ec == http::error::header_limit) {
        error = make_api_error(ErrorKind::payload_too_large, "request headers are too large");
    } else if (ec == beast::error::timeout) {
        if (got_some) {
            error = make_api_error(ErrorKind::request_timeout, "request not received in time");
        }
    } else if (ec.category() == beast::error_code(http::error::end_of_stream).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
        error =
            make_api_error(ErrorKind::invalid_request, "malformed HTTP request: " + ec.message());
    }
    if (!error) co_return;  // the client went away or idled out: just close
    server_->log(LogLevel::info,
                 id + " " + std::to_string(map_error(error->kind).status) + " " + error->message);
    SimpleResponse response;
    response.status = map_error(error->kind).status;
    response.body = error_body(*error, id);
    co_await write_simple(response, version, /*keep_alive=*/false, id);
    if (error->kind == ErrorKind::payload_too_large) co_await linger_close();
}

net::awaitable<void> Session::linger_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    std::size_t drained = 0;
    std::vector<char> scratch(16384);
    stream_.expires_after(kLingerTime);
    while (drained < kLingerBytes) {
        auto [ec, n] = co_await stream_.async_read_some(net::buffer(scratch), kUseTuple);
        if (ec) break;
        drained += n;
    }
}

net::awaitable<bool> Session::write_simple(const SimpleResponse& response, unsigned version,
                                           bool keep_alive, const std::string& request_id,
                                           bool head_only) {
    http::response<http::string_body> res{static_cast<http::status>(response.status), version};
    apply_common_headers(res, request_id);
    if (!response.content_type.empty()) res.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) res.set(name, value);
    res.keep_alive(keep_alive);
    if (head_only) {
        res.content_length(response.body.size());
    } else {
        res.body() = response.body;
        res.prepare_payload();
    }
    stream_.expires_after(server_->options.write_timeout);
    http::serializer<false, http::string_body> serializer{res};
    if (head_only) serializer.split(true);
    auto [ec, n] = head_only ? co_await http::async_write_header(stream_, serializer, kUseTuple)
                             : co_await http::async_write(stream_, serializer, kUseTuple);
    co_return !ec && keep_alive;
}

net::awaitable<bool> Session::handle(http::request<http::string_body>& request) {
    const std::string id = server_->ids.next(Router::id_prefix(request.target()));
    const HttpRequestInfo info{request.method_string(), request.target(),
                               request[http::field::authorization], request.body()};
    RouteResult routed = server_->router.route(info, id);
    const bool keep_alive = request.keep_alive() && !server_->stopping;
    if (routed.response) {
        const SimpleResponse& response = *routed.response;
        if (response.error) {
            server_->log(LogLevel::info, id + " " + std::string(request.method_string()) + " " +
                                             std::string(request.target()) + " " +
                                             std::to_string(response.status) + " " +
                                             std::string(error_kind_name(response.error->kind)) +
                                             ": " + response.error->message);
        } else {
            server_->log(LogLevel::debug, id + " " + std::string(request.method_string()) + " " +
                                              std::string(request.target()) + " " +
                                              std::to_string(response.status));
        }
        co_return co_await write_simple(response, request.version(), keep_alive, id,
                                        request.method() == http::verb::head);
    }
    co_return co_await serve_completion(*routed.completion, request.version(), keep_alive);
}

void Session::deliver(std::uint64_t serial, ServiceEvent event) {
    if (serial != serial_ || !exchange_ || exchange_done_) return;  // stale or abandoned
    // Given up on a slow client: what the service says after its cancellation (often an error
    // about being cancelled) is not the outcome of this request.
    if (too_slow_) return;
    ExchangeOutput out = exchange_->handle(std::move(event));
    if (out.head) {
        pending_head_ = out.head;
        if (!out.head->stream) full_body_ = std::exchange(out.body, {});
    }
    if (!out.body.empty() && !outbox_->push(out.body) && !too_slow_) {
        // The client reads slower than we generate: give up now rather than buffer without
        // bound. Cancelling the socket's operations also ends a write stuck on a full window.
        too_slow_ = true;
        exchange_->abandon("client too slow");
        cancel_->cancel();
        beast::error_code ignored;
        stream_.socket().cancel(ignored);
    }
    if (out.finished) exchange_done_ = true;
    wake_.cancel();
}

void Session::start_watch() {
    // A read while the response is produced: EOF or an error means the client left, so the
    // generation is cancelled at once rather than at the next failed write.
    watching_ = true;
    stream_.socket().async_read_some(
        buffer_.prepare(kWatchReadBytes),
        [self = shared_from_this()](beast::error_code ec, std::size_t n) {
            self->watching_ = false;
            if (!ec) {
                self->buffer_.commit(n);  // a pipelined request: kept for the next read
            } else if (ec != net::error::operation_aborted) {
                self->client_gone_ = true;
            }
            self->wake_.cancel();
        });
}

net::awaitable<void> Session::wait_woken(Clock::time_point until) {
    wake_.expires_at(until);
    auto [ec] = co_await wake_.async_wait(kUseTuple);
    (void)ec;
}

net::awaitable<bool> Session::serve_completion(CompletionRequest& request, unsigned version,
                                               bool keep_alive) {
    HttpServer::Impl& server = *server_;
    const std::string id = request.id;
    const std::size_t limit = server.options.max_concurrency;
    if (server.active.fetch_add(1) >= limit && limit != 0) {
        --server.active;
        const ServiceError error =
            make_api_error(ErrorKind::overloaded, "server busy: " + std::to_string(limit) +
                                                      " requests in flight; retry later");
        server.log(LogLevel::info, id + " 429 overloaded");
        SimpleResponse response;
        response.status = map_error(error.kind).status;
        response.body = error_body(error, id);
        response.headers.emplace_back("Retry-After", "1");
        co_return co_await write_simple(response, version, keep_alive, id);
    }
    struct ActiveGuard {
        std::atomic<std::size_t>& active;
        ~ActiveGuard() { --active; }
    } guard{server.active};

    const Clock::time_point started = Clock::now();
    ++serial_;
    exchange_.emplace(request, unix_now());
    outbox_.emplace(server.options.max_pending_stream_bytes);
    pending_head_.reset();
    full_body_.clear();
    exchange_done_ = too_slow_ = client_gone_ = false;
    cancel_ = std::make_shared<Cancellation>();
    const bool raw_stream = version < 11;  // HTTP/1.0 has no chunked encoding: close to end
    if (raw_stream) keep_alive = false;

    auto sink = std::make_shared<PostingSink>(weak_from_this(), stream_.get_executor(), serial_);
    server.service.start(std::move(request), std::move(sink), cancel_);
    start_watch();

    bool ok = true;
    bool streaming = false;
    std::string failure;
    Clock::time_point last_write = Clock::now();
    for (;;) {
        while (!pending_head_ && outbox_->empty() && !exchange_done_ && !client_gone_ &&
               !too_slow_ && !stopping_) {
            const Clock::time_point due = last_write + server.options.sse_keepalive;
            if (Clock::now() >= due) {
                const ExchangeOutput ping = exchange_->keepalive();
                if (!ping.body.empty() && !outbox_->push(ping.body)) too_slow_ = true;
                last_write = Clock::now();
                continue;
            }
            co_await wait_woken(due);
        }
        // Checked before every write: the state may change while a write is in flight.
        const auto abandon_reason = [this]() -> const char* {
            return client_gone_ ? "client disconnected"
                   : too_slow_  ? "client too slow"
                   : stopping_  ? "server stopping"
                                : nullptr;
        };
        if (const char* reason = abandon_reason()) {
            ok = false;
            failure = reason;
            break;
        }
        if (pending_head_) {
            const ResponseHead head = *pending_head_;
            pending_head_.reset();
            if (!head.stream) {  // the whole answer at once (non-stream, or an early error)
                SimpleResponse response;
                response.status = head.status;
                response.content_type = head.content_type;
                response.body = std::exchange(full_body_, {});
                const bool keep = co_await write_simple(response, version, keep_alive, id);
                ok = keep || !keep_alive;
                keep_alive = keep;
                if (!ok) failure = "write failed";
                break;
            }
            http::response<http::empty_body> res{static_cast<http::status>(head.status), version};
            apply_common_headers(res, id);
            res.set(http::field::content_type, head.content_type);
            res.set(http::field::cache_control, "no-cache");
            res.set("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
            res.keep_alive(keep_alive);
            if (!raw_stream) res.chunked(true);
            http::response_serializer<http::empty_body> serializer{res};
            stream_.expires_after(server.options.write_timeout);
            auto [ec, n] = co_await http::async_write_header(stream_, serializer, kUseTuple);
            if (ec) {
                ok = false;
                failure = too_slow_ ? "client too slow" : "write failed: " + ec.message();
                break;
            }
            streaming = true;
            last_write = Clock::now();
        }
        if (const char* reason = abandon_reason()) {
            ok = false;
            failure = reason;
            break;
        }
        if (!outbox_->empty()) {
            const std::string bytes = outbox_->take();
            stream_.expires_after(server.options.write_timeout);
            beast::error_code ec;
            std::size_t n = 0;
            if (raw_stream) {
                std::tie(ec, n) = co_await net::async_write(stream_, net::buffer(bytes), kUseTuple);
            } else {
                std::tie(ec, n) = co_await net::async_write(
                    stream_, http::make_chunk(net::buffer(bytes)), kUseTuple);
            }
            if (ec) {
                ok = false;
                failure = too_slow_ ? "client too slow" : "write failed: " + ec.message();
                break;
            }
            last_write = Clock::now();
        }
        if (exchange_done_ && outbox_->empty() && !pending_head_) {
            if (streaming && !raw_stream) {
                stream_.expires_after(server.options.write_timeout);
                auto [ec, n] =
                    co_await net::async_write(stream_, http::make_chunk_last(), kUseTuple);
                if (ec) {
                    ok = false;
                    failure = too_slow_ ? "client too slow" : "write failed: " + ec.message();
                }
            }
            break;
        }
    }

    if (!ok) {
        cancel_->cancel();  // frees the service's slot
        exchange_->abandon(failure);
        keep_alive = false;
    }
    server.log(LogLevel::info, exchange_->log_line(ms_since(started)));
    exchange_.reset();
    outbox_.reset();
    if (keep_alive && watching_) {
        // Stop watching before the next request is read (one read at a time on a socket).
        beast::error_code ignored;
        stream_.socket().cancel(ignored);
        while (watching_) co_await wait_woken(Clock::now() + std::chrono::seconds(1));
    }
    co_return keep_alive && !client_gone_;
}

net::awaitable<void> HttpServer::Impl::accept_loop() {
    for (;;) {
        auto [ec, socket] =
            co_await acceptor.async_accept(net::any_io_executor(net::make_strand(io)), kUseTuple);
        if (stopping) co_return;
        if (ec) {
            if (ec == net::error::operation_aborted || ec == net::error::bad_descriptor) co_return;
            log(LogLevel::warn, "accept failed: " + ec.message());
            // Out of file descriptors and the like: pause instead of spinning.
            net::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(100));
            co_await pause.async_wait(kUseTuple);
            continue;
        }
        if (connections.load() >= options.max_connections) {
            log(LogLevel::warn, "too many connections; closing a new one");
            beast::error_code ignored;
            socket.close(ignored);
            continue;
        }
        auto session = std::make_shared<Session>(shared_from_this(), std::move(socket));
        add_session(session);
        // The completion handler owns the session until its coroutine ends.
        net::co_spawn(session->executor(), session->run(),
                      [self = shared_from_this(), session](std::exception_ptr error) {
                          if (!error) return;
                          try {
                              std::rethrow_exception(error);
                          } catch (const std::exception& e) {
                              self->log(LogLevel::error,
                                        std::string("connection failed: ") + e.what());
                          }
                      });
    }
}

void HttpServer::Impl::add_session(const std::shared_ptr<Session>& session) {
    std::lock_guard lock(sessions_mutex);
    std::erase_if(sessions, [](const std::weak_ptr<Session>& s) { return s.expired(); });
    sessions.push_back(session);
}

void HttpServer::Impl::stop() {
    if (stopping.exchange(true)) return;
    net::post(acceptor.get_executor(), [self = shared_from_this()] {
        beast::error_code ignored;
        self->acceptor.close(ignored);
    });
    std::vector<std::weak_ptr<Session>> to_stop;
    {
        std::lock_guard lock(sessions_mutex);
        to_stop.swap(sessions);
    }
    for (auto& weak : to_stop) {
        if (auto session = weak.lock()) session->shutdown();
    }
}

HttpServer::HttpServer(net::io_context& io, CompletionService& service, ServerOptions options)
    : impl_(std::make_shared<Impl>(io, service, std::move(options))) {}

HttpServer::~HttpServer() { impl_->stop(); }

boost::system::result<std::uint16_t> HttpServer::start() {
    beast::error_code ec;
    const net::ip::address address = net::ip::make_address(impl_->options.host, ec);
    if (ec) return ec;
    const tcp::endpoint endpoint{address, impl_->options.port};
    tcp::acceptor& acceptor = impl_->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (ec) return ec;
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (ec) return ec;
    acceptor.bind(endpoint, ec);
    if (ec) return ec;
    acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return ec;
    const std::uint16_t port = acceptor.local_endpoint().port();
    impl_->log(LogLevel::info,
               "listening on http://" + impl_->options.host + ":" + std::to_string(port));
    net::co_spawn(
        acceptor.get_executor(), impl_->accept_loop(), [impl = impl_](std::exception_ptr error) {
            if (!error) return;
            try {
                std::rethrow_exception(error);
            } catch (const std::exception& e) {
                impl->log(LogLevel::error, std::string("accept loop failed: ") + e.what());
            }
        });
    return port;
}

void HttpServer::stop() { impl_->stop(); }

std::size_t HttpServer::active_completions() const { return impl_->active.load(); }

std::size_t HttpServer::open_connections() const { return impl_->connections.load(); }

}  // namespace brigade::api
