#include "model/backend.hpp"

namespace brigade::model {

// Replaced as backends land; until then every kind reports that it is unavailable.
Result<std::unique_ptr<Backend>> make_backend(BackendKind kind, const BackendOptions&) {
    (void)kind;
    return make_error(errc::unsupported_architecture, "no compute backend is built yet");
}

}  // namespace brigade::model
