#pragma once
// The scalar reference backend: plain loops, one thread, f32 accumulation in a fixed order.
// It defines the numbers every other backend is tested against (backend.hpp).

#include <memory>

#include "model/backend.hpp"

namespace brigade::model::cpu {

std::unique_ptr<Backend> make_reference_backend();

// Zero-filled host memory aligned to 64 bytes, shared by the CPU backends.
DeviceBuffer alloc_host_buffer(std::size_t bytes);

}  // namespace brigade::model::cpu
