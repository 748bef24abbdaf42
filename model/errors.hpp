#pragma once
// Expected failures of the model module: an error code from `model::errc` plus a message that
// names the file, tensor or key involved. Programmer errors use BRIGADE_CHECK instead.

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>
#include <source_location>
#include <string>
#include <system_error>
#include <utility>

namespace brigade::model {

enum class errc {
    io_error = 1,              // open/read/mmap failed
    bad_format,                // a file is not what it claims (truncated, lying header, bad JSON)
    missing_tensor,            // a tensor the model needs is absent
    shape_mismatch,            // a tensor's shape disagrees with the config
    unsupported_dtype,         // a dtype we cannot compute with
    unsupported_architecture,  // model_type / rope type / quant mode we do not implement
    bad_config,                // config.json values missing or inconsistent
    invalid_argument,          // a caller passed something out of contract
    out_of_range,              // token id, position or context length out of bounds
    bad_tokenizer,             // tokenizer.json / vocab files unusable
    bad_input_text,            // text that cannot be tokenized (e.g. invalid UTF-8)
    template_error,            // chat template syntax or render error
};

const boost::system::error_category& model_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), model_category()};
}

// An error that says what went wrong and where, for people.
struct Error {
    errc code = errc::invalid_argument;
    std::string message;

    std::string what() const;
};

// Thrown only by `Result::value()` on an error; most code checks `has_value()` first.
class ModelException : public std::runtime_error {
public:
    explicit ModelException(Error e) : std::runtime_error(e.what()), error_(std::move(e)) {}
    const Error& error() const noexcept { return error_; }

private:
    Error error_;
};

// Found by ADL from boost::system::result<T, Error>::value().
[[noreturn]] void throw_exception_from_error(const Error& e, const boost::source_location& loc);

template <class T>
using Result = boost::system::result<T, Error>;

inline Error make_error(errc code, std::string message) { return Error{code, std::move(message)}; }

}  // namespace brigade::model

namespace boost::system {
template <>
struct is_error_code_enum<brigade::model::errc> : std::true_type {};
}  // namespace boost::system
