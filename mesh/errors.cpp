#include "mesh/errors.hpp"

namespace brigade::mesh {
namespace {

class MeshCategory final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "brigade.mesh"; }
    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
            case errc::bad_frame:
                return "malformed frame";
            case errc::frame_too_large:
                return "frame too large";
            case errc::unknown_type:
                return "unknown frame type";
            case errc::bad_version:
                return "incompatible protocol version";
            case errc::handshake_failed:
                return "handshake failed";
            case errc::decrypt_failed:
                return "decryption failed";
            case errc::bad_token:
                return "bad invite token";
            case errc::bad_identity:
                return "bad identity";
            case errc::io_error:
                return "I/O error";
            case errc::timeout:
                return "timed out";
            case errc::closed:
                return "link closed";
            case errc::invalid_argument:
                return "invalid argument";
            case errc::no_fit:
                return "model does not fit";
            case errc::stale_epoch:
                return "stale epoch";
            case errc::not_coordinator:
                return "not the coordinator";
            case errc::bad_beacon:
                return "bad beacon";
            case errc::refused:
                return "connection refused";
        }
        return "unknown mesh error";
    }
};

}  // namespace

const boost::system::error_category& mesh_category() noexcept {
    static const MeshCategory category;  // immutable after construction
    return category;
}

std::string Error::what() const {
    return mesh_category().message(static_cast<int>(code)) + ": " + message;
}

void throw_exception_from_error(const Error& e, const boost::source_location&) {
    throw MeshException(e);
}

}  // namespace brigade::mesh
