#pragma once
// Expected failures of the mesh module: an error code from `mesh::errc` plus a message that says
// which peer, frame or field was wrong. mesh/ cannot include model/errors.hpp (house guide §1), so
// it has its own category, built the same way.

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>
#include <source_location>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace brigade::mesh {

enum class errc {
    bad_frame = 1,     // a frame or message body is malformed
    frame_too_large,   // a length exceeds the configured limit (checked before allocating)
    unknown_type,      // a frame type this version does not know
    bad_version,       // incompatible protocol major version
    handshake_failed,  // Noise handshake failed (wrong mesh secret, tampering, bad identity)
    decrypt_failed,    // a transport record failed authentication (tampered/replayed/reordered)
    bad_token,         // an invite token is malformed, truncated or fails its checksum
    bad_identity,      // key files unreadable, wrong permissions, or a peer's identity mismatch
    io_error,          // socket or file I/O failed
    timeout,           // a network wait ran past its deadline
    closed,            // the link is closed
    invalid_argument,  // a caller passed something out of contract
    no_fit,            // the planner found no layout that holds the model
    stale_epoch,       // a plan message carries an epoch we already passed
    not_coordinator,   // a plan came from a node that is not the coordinator in our view
    bad_beacon,        // a discovery beacon failed authentication or is outside the time window
    refused,           // the host answered that nothing listens at the address
};

const boost::system::error_category& mesh_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), mesh_category()};
}

struct Error {
    errc code = errc::invalid_argument;
    std::string message;

    std::string what() const;
};

class MeshException : public std::runtime_error {
public:
    explicit MeshException(Error e) : std::runtime_error(e.what()), error_(std::move(e)) {}
    const Error& error() const noexcept { return error_; }

private:
    Error error_;
};

// Found by ADL from boost::system::result<T, Error>::value().
[[noreturn]] void throw_exception_from_error(const Error& e, const boost::source_location& loc);

template <class T>
using Result = boost::system::result<T, Error>;

inline Error make_error(errc code, std::string message) { return Error{code, std::move(message)}; }

}  // namespace brigade::mesh

namespace boost::system {
template <>
struct is_error_code_enum<brigade::mesh::errc> : std::true_type {};
}  // namespace boost::system
