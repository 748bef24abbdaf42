#include "api/errors.hpp"

namespace brigade::api {

namespace {

struct ErrorRow {
    ErrorKind kind;
    std::string_view name;
    ErrorMapping mapping;
};

// Status codes and types follow OpenAI's API (formats.md §6.4): validation and context-length
// errors are 400 `invalid_request_error`; a wrong key is 401 with code `invalid_api_key`; an
// unknown model is 404 with code `model_not_found`; a full queue is 429.
constexpr ErrorRow kErrorTable[] = {
    {ErrorKind::invalid_request, "invalid_request", {400, "invalid_request_error", ""}},
    {ErrorKind::context_length_exceeded,
     "context_length_exceeded",
     {400, "invalid_request_error", "context_length_exceeded"}},
    {ErrorKind::model_not_found,
     "model_not_found",
     {404, "invalid_request_error", "model_not_found"}},
    {ErrorKind::overloaded, "overloaded", {429, "rate_limit_error", "server_overloaded"}},
    {ErrorKind::unavailable, "unavailable", {503, "server_error", "unavailable"}},
    {ErrorKind::internal, "internal", {500, "server_error", "internal_error"}},
    {ErrorKind::not_supported, "not_supported", {501, "not_supported_error", "not_supported"}},
    {ErrorKind::invalid_json, "invalid_json", {400, "invalid_request_error", "invalid_json"}},
    {ErrorKind::unauthorized, "unauthorized", {401, "invalid_request_error", "invalid_api_key"}},
    {ErrorKind::route_not_found, "route_not_found", {404, "not_found_error", "not_found"}},
    {ErrorKind::method_not_allowed,
     "method_not_allowed",
     {405, "invalid_request_error", "method_not_allowed"}},
    {ErrorKind::request_timeout, "request_timeout", {408, "invalid_request_error", "timeout"}},
    {ErrorKind::payload_too_large,
     "payload_too_large",
     {413, "invalid_request_error", "payload_too_large"}},
};

const ErrorRow& row_for(ErrorKind kind) noexcept {
    for (const auto& row : kErrorTable) {
        if (row.kind == kind) return row;
    }
    return kErrorTable[5];  // internal: unreachable unless the enum grows without the table
}

}  // namespace

void throw_exception_from_error(const ServiceError& error, const boost::source_location&) {
    throw ApiException(error);
}

ErrorMapping map_error(ErrorKind kind) noexcept { return row_for(kind).mapping; }

std::string_view error_kind_name(ErrorKind kind) noexcept { return row_for(kind).name; }

nlohmann::json error_json(const ServiceError& error, std::string_view request_id) {
    const ErrorMapping mapping = map_error(error.kind);
    std::string message = error.message;
    if (message.empty()) message = std::string(error_kind_name(error.kind));
    if (mapping.status >= 500 && !request_id.empty()) {
        message += " (request id ";
        message += request_id;
        message += ")";
    }
    nlohmann::json body = {{"message", std::move(message)},
                           {"type", std::string(mapping.type)},
                           {"param", nullptr},
                           {"code", nullptr}};
    if (!error.param.empty()) body["param"] = error.param;
    if (!mapping.code.empty()) body["code"] = std::string(mapping.code);
    return {{"error", std::move(body)}};
}

std::string error_body(const ServiceError& error, std::string_view request_id) {
    return error_json(error, request_id)
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace brigade::api
