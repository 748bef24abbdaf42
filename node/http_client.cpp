#include "node/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace brigade::node {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

model::Error net_error(const std::string& what, const boost::system::error_code& ec) {
    if (ec == beast::error::timeout) {
        return {model::errc::io_error, what + ": timed out"};
    }
    return {model::errc::io_error, what + ": " + ec.message()};
}

// Runs one asynchronous operation to completion on `io` under the stream's deadline. Blocking
// socket calls cannot be used here: Asio turns an SO_RCVTIMEO expiry into an endless poll(),
// and a signal arriving on this thread (SIGCHLD) fails them with EINTR.
template <class Start>
boost::system::error_code run_op(asio::io_context& io, beast::tcp_stream& stream,
                                 std::chrono::milliseconds timeout, Start start) {
    boost::system::error_code result = asio::error::would_block;
    stream.expires_after(timeout);
    start([&result](boost::system::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
}

}  // namespace

model::Result<HttpUrl> parse_http_url(std::string_view url) {
    constexpr std::string_view kScheme = "http://";
    if (url.substr(0, 8) == "https://") {
        return model::make_error(
            model::errc::invalid_argument,
            "https URLs are not supported; use http:// (" + std::string(url) + ")");
    }
    if (url.substr(0, kScheme.size()) != kScheme) {
        return model::make_error(
            model::errc::invalid_argument,
            "expected a URL like http://127.0.0.1:8177, got \"" + std::string(url) + "\"");
    }
    std::string_view rest = url.substr(kScheme.size());
    HttpUrl out;
    const auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) out.base_path = std::string(rest.substr(slash));
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
    if (!authority.empty() && authority.front() == '[') {  // [::1]:8177
        const auto close = authority.find(']');
        if (close == std::string_view::npos) {
            return model::make_error(model::errc::invalid_argument, "bad IPv6 host in URL");
        }
        out.host = std::string(authority.substr(1, close - 1));
        authority = authority.substr(close + 1);
        if (!authority.empty() && authority.front() == ':') out.port = authority.substr(1);
    } else {
        const auto colon = authority.rfind(':');
        out.host = std::string(authority.substr(0, colon));
        if (colon != std::string_view::npos) out.port = std::string(authority.substr(colon + 1));
    }
    if (out.host.empty() || out.port.empty()) {
        return model::make_error(model::errc::invalid_argument,
                                 "no host or port in URL \"" + std::string(url) + "\"");
    }
    return out;
}

model::Result<HttpResponse> http_request(const HttpUrl& url, const HttpRequest& request) {
    asio::io_context io;
    tcp::resolver resolver(io);
    boost::system::error_code ec;
    const auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) return net_error("cannot resolve " + url.host, ec);
    beast::tcp_stream stream(io);
    ec = run_op(io, stream, request.timeout,
                [&](auto handler) { stream.async_connect(endpoints, std::move(handler)); });
    if (ec) return net_error("cannot connect to " + url.host + ":" + url.port, ec);

    http::request<http::string_body> req;
    req.method(http::string_to_verb(request.method));
    req.target(url.base_path + request.target);
    req.version(11);
    req.set(http::field::host, url.host + ":" + url.port);
    req.set(http::field::user_agent, "brigade");
    req.set(http::field::connection, "close");
    for (const auto& [name, value] : request.headers) req.set(name, value);
    if (!request.body.empty() || request.method == "POST") {
        req.body() = request.body;
        req.prepare_payload();
    }
    ec = run_op(io, stream, request.timeout,
                [&](auto handler) { http::async_write(stream, req, std::move(handler)); });
    if (ec) return net_error("sending the request failed", ec);

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    ec = run_op(io, stream, request.timeout, [&](auto handler) {
        http::async_read_header(stream, buffer, parser, std::move(handler));
    });
    if (ec) return net_error("reading the response failed", ec);
    HttpResponse response;
    response.status = static_cast<int>(parser.get().result_int());
    response.content_type = std::string(parser.get()[http::field::content_type]);
    if (request.on_head) request.on_head(response);

    char chunk[16384];
    while (!parser.is_done()) {
        parser.get().body().data = chunk;
        parser.get().body().size = sizeof chunk;
        ec = run_op(io, stream, request.timeout, [&](auto handler) {
            // read_some: hand over what arrived (an SSE event) instead of waiting for a full
            // chunk buffer.
            http::async_read_some(stream, buffer, parser, std::move(handler));
        });
        if (ec == http::error::need_buffer) ec = {};
        if (ec) return net_error("reading the response body failed", ec);
        const std::size_t n = sizeof chunk - parser.get().body().size;
        if (n == 0) continue;
        const std::string_view bytes(chunk, n);
        if (request.on_body) {
            if (!request.on_body(bytes)) {
                stream.socket().shutdown(tcp::socket::shutdown_both, ec);
                stream.close();
                return response;
            }
        } else {
            response.body.append(bytes);
        }
    }
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return response;
}

}  // namespace brigade::node
