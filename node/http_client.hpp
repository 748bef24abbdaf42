#pragma once
// A small blocking HTTP/1.1 client on Beast for `brigade chat`, `brigade status` and the tests:
// one request per connection, the response body handed over as it arrives so SSE streams print
// while they are generated. Every step (connect, write, each read) has a deadline.

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/errors.hpp"

namespace brigade::node {

struct HttpUrl {
    std::string host;
    std::string port = "80";
    std::string base_path;  // without a trailing '/', e.g. "" or "/proxy"
};

// Parses "http://host[:port][/path]". https is not supported (a clear error says so).
model::Result<HttpUrl> parse_http_url(std::string_view url);

struct HttpResponse {
    int status = 0;
    std::string content_type;
    std::string body;  // empty when `on_body` took the bytes
};

struct HttpRequest {
    std::string method = "GET";
    std::string target = "/";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    // Receives body bytes as they arrive; returning false closes the connection at once (a
    // client walking away mid-stream). Unset: the body is collected into `HttpResponse::body`.
    std::function<bool(std::string_view)> on_body;
    // Called once the status line and headers are in, before any body bytes.
    std::function<void(const HttpResponse&)> on_head;
    std::chrono::milliseconds timeout{120'000};  // per step: connect, write, each read
};

// Connection failures and timeouts are errors; any HTTP status is a response.
model::Result<HttpResponse> http_request(const HttpUrl& url, const HttpRequest& request);

}  // namespace brigade::node
