#pragma once
// One table from `ErrorKind` to HTTP status and OpenAI error `type`/`code` (house guide §4), and
// the OpenAI error object: {"error": {"message", "type", "param", "code"}} (formats.md §6.4).

#include <boost/system/result.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "api/completion_service.hpp"

namespace brigade::api {

// Expected failures of the API layer carry the OpenAI-facing error.
template <class T>
using ApiResult = boost::system::result<T, ServiceError>;

// Found by ADL from `ApiResult<T>::value()` on an error; throws `ApiException`.
[[noreturn]] void throw_exception_from_error(const ServiceError& error,
                                             const boost::source_location& location);

class ApiException : public std::runtime_error {
public:
    explicit ApiException(ServiceError error)
        : std::runtime_error(error.message), error_(std::move(error)) {}
    const ServiceError& error() const noexcept { return error_; }

private:
    ServiceError error_;
};

inline ServiceError make_api_error(ErrorKind kind, std::string message, std::string param = {}) {
    return ServiceError{kind, std::move(message), std::move(param)};
}

struct ErrorMapping {
    int status = 500;
    std::string_view type;  // OpenAI `error.type`
    std::string_view code;  // OpenAI `error.code`; empty means null
};

ErrorMapping map_error(ErrorKind kind) noexcept;

// A short stable name for logs and tests ("context_length_exceeded", …).
std::string_view error_kind_name(ErrorKind kind) noexcept;

// The OpenAI error object. 500s get the request id appended to the message so that a user's
// report can be matched with the server's log line.
nlohmann::json error_json(const ServiceError& error, std::string_view request_id = {});

// `error_json(...).dump()`, never throwing on odd bytes in the message.
std::string error_body(const ServiceError& error, std::string_view request_id = {});

}  // namespace brigade::api
