#include "api/router.hpp"

#include <cstdio>

#include "api/errors.hpp"
#include "api/openai_responses.hpp"
#include "api/status_page.hpp"

namespace brigade::api {

namespace {

std::string_view path_of(std::string_view target) {
    const std::size_t query = target.find_first_of("?#");
    if (query != std::string_view::npos) target = target.substr(0, query);
    // "/v1/models/" and "/v1/models" are the same route.
    while (target.size() > 1 && target.back() == '/') target.remove_suffix(1);
    return target;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
        if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
}

// Comparison whose time does not depend on where the strings differ.
bool constant_time_equals(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::size_t n = a.size() < b.size() ? a.size() : b.size();
    for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

enum class Route { status_page, health, models, model, mesh, chat, completions, unknown };

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The name in /v1/models/{name} (or /models/{name}): the rest of the path, percent-decoded
// (a name may hold '/', sent as is or as %2F). nullopt for a malformed escape.
std::optional<std::string> model_name_of(std::string_view path) {
    for (std::string_view prefix : {"/v1/models/", "/models/"}) {
        if (path.substr(0, prefix.size()) != prefix) continue;
        std::string_view rest = path.substr(prefix.size());
        std::string out;
        for (std::size_t i = 0; i < rest.size(); ++i) {
            if (rest[i] != '%') {
                out += rest[i];
                continue;
            }
            if (i + 2 >= rest.size()) return std::nullopt;
            const int hi = hex_digit(rest[i + 1]), lo = hex_digit(rest[i + 2]);
            if (hi < 0 || lo < 0) return std::nullopt;
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        }
        return out;
    }
    return std::nullopt;
}

Route route_of(std::string_view path) {
    if (path == "/") return Route::status_page;
    if (path == "/health" || path == "/v1/health") return Route::health;
    if (path == "/v1/models" || path == "/models") return Route::models;
    if (path.starts_with("/v1/models/") || path.starts_with("/models/")) return Route::model;
    if (path == "/v1/mesh") return Route::mesh;
    if (path == "/v1/chat/completions" || path == "/chat/completions") return Route::chat;
    if (path == "/v1/completions" || path == "/completions") return Route::completions;
    return Route::unknown;
}

}  // namespace

RequestIdGenerator::RequestIdGenerator(std::uint64_t salt) : salt_(salt) {}

std::string RequestIdGenerator::next(std::string_view prefix) {
    const std::uint64_t n = counter_.fetch_add(1, std::memory_order_relaxed);
    char buffer[48];
    std::snprintf(buffer, sizeof buffer, "-%08llx%06llx",
                  static_cast<unsigned long long>(salt_ & 0xffffffffULL),
                  static_cast<unsigned long long>(n));
    return std::string(prefix) + buffer;
}

Router::Router(RouterOptions options, CompletionService& service)
    : options_(std::move(options)), service_(service) {}

std::string_view Router::id_prefix(std::string_view target) {
    switch (route_of(path_of(target))) {
        case Route::chat:
            return "chatcmpl";
        case Route::completions:
            return "cmpl";
        default:
            return "req";
    }
}

HeaderList Router::cors_headers() const {
    if (options_.cors_origin.empty()) return {};
    return {{"Access-Control-Allow-Origin", options_.cors_origin},
            {"Access-Control-Expose-Headers", "X-Request-Id"}};
}

bool Router::authorized(std::string_view authorization) const {
    if (options_.api_key.empty()) return true;
    constexpr std::string_view kScheme = "Bearer ";
    if (authorization.size() < kScheme.size() ||
        !iequals(authorization.substr(0, kScheme.size()), kScheme)) {
        return false;
    }
    std::string_view key = authorization.substr(kScheme.size());
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
    while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
    return constant_time_equals(key, options_.api_key);
}

SimpleResponse Router::error_response(const ServiceError& error,
                                      const std::string& request_id) const {
    SimpleResponse response;
    response.status = map_error(error.kind).status;
    response.body = error_body(error, request_id);
    response.error = error;
    if (error.kind == ErrorKind::unauthorized) {
        response.headers.emplace_back("WWW-Authenticate", "Bearer");
    }
    return response;
}

RouteResult Router::route(const HttpRequestInfo& request, const std::string& request_id) const {
    RouteResult result;
    const std::string_view path = path_of(request.target);
    const Route route = route_of(path);

    if (request.method == "OPTIONS") {  // CORS preflight: no auth, no body
        SimpleResponse response;
        response.status = 204;
        response.content_type.clear();
        if (!options_.cors_origin.empty()) {
            response.headers = {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                                {"Access-Control-Allow-Headers",
                                 "Authorization, Content-Type, Accept, X-Requested-With, "
                                 "OpenAI-Organization, OpenAI-Project, X-Stainless-Lang, "
                                 "X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, "
                                 "X-Stainless-Runtime, X-Stainless-Runtime-Version, "
                                 "X-Stainless-Retry-Count, X-Stainless-Timeout"},
                                {"Access-Control-Max-Age", "86400"}};
        }
        result.response = std::move(response);
        return result;
    }
    if (route == Route::unknown) {
        result.response = error_response(
            make_api_error(ErrorKind::route_not_found,
                           "no route for " + std::string(request.method) + " " + std::string(path)),
            request_id);
        return result;
    }
    const bool want_get = route == Route::status_page || route == Route::health ||
                          route == Route::models || route == Route::model || route == Route::mesh;
    if (request.method != (want_get ? "GET" : "POST") && !(want_get && request.method == "HEAD")) {
        result.response = error_response(
            make_api_error(ErrorKind::method_not_allowed,
                           std::string(request.method) + " is not allowed on " + std::string(path) +
                               "; use " + (want_get ? "GET" : "POST")),
            request_id);
        result.response->headers.emplace_back("Allow", want_get ? "GET, HEAD" : "POST");
        return result;
    }
    // /health stays open so that load balancers and `brigade status` need no key; the status
    // page too, showing no more than the health without the key.
    if (route != Route::health && route != Route::status_page &&
        !authorized(request.authorization)) {
        result.response = error_response(
            make_api_error(ErrorKind::unauthorized,
                           request.authorization.empty()
                               ? "missing API key: send 'Authorization: Bearer <key>'"
                               : "incorrect API key"),
            request_id);
        return result;
    }

    switch (route) {
        case Route::health: {
            const Health health = service_.health();
            SimpleResponse response;
            response.status = health.state == HealthState::ok ? 200 : 503;
            response.body = dump_json(health_json(health));
            result.response = std::move(response);
            return result;
        }
        case Route::status_page: {
            SimpleResponse response;
            response.content_type = "text/html; charset=utf-8";
            const std::vector<ModelInfo> models = service_.list_models();
            const Health health = service_.health();
            StatusPage page;
            page.model = models.empty() ? "" : models.front().id;
            page.health = health_json(health);
            if (authorized(request.authorization)) {
                page.status_text = service_.status_text();
            } else {
                page.locked = true;
            }
            response.body = render_status_page(page);
            result.response = std::move(response);
            return result;
        }
        case Route::models: {
            SimpleResponse response;
            response.body = dump_json(models_json(service_.list_models()));
            result.response = std::move(response);
            return result;
        }
        case Route::model: {
            // GET /v1/models/{model}: what the OpenAI SDKs' models.retrieve asks.
            const std::optional<std::string> name = model_name_of(path);
            const std::vector<ModelInfo> models = service_.list_models();
            const ModelInfo* model = name ? find_model(models, *name) : nullptr;
            if (model == nullptr || name->empty()) {
                result.response = error_response(
                    make_api_error(ErrorKind::model_not_found,
                                   "no model '" + (name ? *name : std::string(path)) +
                                       "' here (GET /v1/models lists the names it answers to)"),
                    request_id);
                return result;
            }
            SimpleResponse response;
            response.body = dump_json(model_json(*model, *name));
            result.response = std::move(response);
            return result;
        }
        case Route::mesh: {
            std::optional<nlohmann::json> status = service_.mesh_status();
            if (!status) {
                result.response = error_response(
                    make_api_error(ErrorKind::route_not_found, "this server is not part of a mesh"),
                    request_id);
                return result;
            }
            SimpleResponse response;
            response.body = dump_json(*status);
            result.response = std::move(response);
            return result;
        }
        case Route::chat:
        case Route::completions: {
            ApiResult<nlohmann::json> body = parse_json_body(request.body);
            if (!body) {
                result.response = error_response(body.error(), request_id);
                return result;
            }
            ApiResult<CompletionRequest> parsed =
                route == Route::chat ? parse_chat_request(*body, options_.limits)
                                     : parse_completion_request(*body, options_.limits);
            if (!parsed) {
                result.response = error_response(parsed.error(), request_id);
                return result;
            }
            parsed->id = request_id;
            result.completion = std::move(*parsed);
            return result;
        }
        case Route::unknown:
            break;
    }
    return result;
}

}  // namespace brigade::api
