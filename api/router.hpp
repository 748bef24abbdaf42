#pragma once
// (method, path) → what to do, without sockets: auth, CORS preflight, health, models, and the
// parsing of completion requests. The Beast driver (http_server.cpp) asks the router and either
// writes the immediate response or starts a completion exchange.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/completion_service.hpp"
#include "api/openai_types.hpp"

namespace brigade::api {

struct RouterOptions {
    std::string api_key;            // empty: no authentication
    std::string cors_origin = "*";  // Access-Control-Allow-Origin; empty: no CORS headers
    RequestLimits limits;
};

struct HttpRequestInfo {
    std::string_view method;  // "GET", "POST", …
    std::string_view target;  // path and query
    std::string_view authorization;
    std::string_view body;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct SimpleResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    HeaderList headers;
    std::optional<ServiceError> error;  // set for error responses (for the log line)
};

struct RouteResult {
    std::optional<SimpleResponse> response;       // answer now, or
    std::optional<CompletionRequest> completion;  // start this completion
};

// Request ids: "<prefix>-<per-server salt><counter>", unique within a server and unlikely to
// collide across restarts. Thread-safe.
class RequestIdGenerator {
public:
    explicit RequestIdGenerator(std::uint64_t salt);
    std::string next(std::string_view prefix);

private:
    std::uint64_t salt_;
    std::atomic<std::uint64_t> counter_{0};
};

class Router {
public:
    Router(RouterOptions options, CompletionService& service);

    // `request_id` is used for completions and error messages.
    RouteResult route(const HttpRequestInfo& request, const std::string& request_id) const;

    // The prefix for a request id: "chatcmpl", "cmpl" or "req".
    static std::string_view id_prefix(std::string_view target);

    // Headers every response carries for browser clients (empty if CORS is off).
    HeaderList cors_headers() const;

private:
    SimpleResponse error_response(const ServiceError& error, const std::string& request_id) const;
    bool authorized(std::string_view authorization) const;

    RouterOptions options_;
    CompletionService& service_;
};

}  // namespace brigade::api
