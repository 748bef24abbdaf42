#include "model/backend.hpp"
#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/reference_backend.hpp"

namespace brigade::model {

Result<std::unique_ptr<Backend>> make_backend(BackendKind kind, const BackendOptions& options) {
    if (options.n_threads < 0) {
        return make_error(errc::invalid_argument, "n_threads must be >= 0 (0 = all cores)");
    }
    switch (kind) {
        case BackendKind::kReference:
            return cpu::make_reference_backend();
        case BackendKind::kCpu: {
            cpu::CpuTuning tuning;
            tuning.int16_activations = options.cpu_int16_activations;
            tuning.int8_activations = options.cpu_int8_activations;
            tuning.split_int8_activations = options.cpu_split_int8_activations;
            tuning.amx = options.cpu_amx;
            return cpu::make_cpu_backend(options, tuning);
        }
        case BackendKind::kCuda:
            break;
    }
    return make_error(errc::unsupported_architecture, "this build has no CUDA backend");
}

}  // namespace brigade::model
