#pragma once
// Writing safetensors files (formats.md §1.1): used by tests and benchmarks to build
// checkpoints, and later by the mesh to cache layer ranges received from peers.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/errors.hpp"

namespace brigade::model::io {

struct TensorToWrite {
    std::string name;
    std::string dtype;  // safetensors dtype string, e.g. "F32", "BF16", "U32"
    std::vector<std::int64_t> shape;
    std::string bytes;  // little-endian element data, row-major
};

struct SafetensorsWriteOptions {
    // The Rust writer pads the header with spaces to a multiple of 8 (so data is aligned);
    // MLX does not. `false` reproduces MLX's unaligned layout.
    bool pad_header = true;
    std::map<std::string, std::string> metadata;  // `__metadata__`, omitted when empty
};

// The complete file contents. Tensors are laid out in the given order.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const SafetensorsWriteOptions& options = {});

Result<void> write_safetensors(const std::filesystem::path& path,
                               const std::vector<TensorToWrite>& tensors,
                               const SafetensorsWriteOptions& options = {});

// Appends `values` as little-endian bytes of the given dtype ("F32", "F16", "BF16") to `out`.
void append_float_bytes(std::string& out, const std::string& dtype, const float* values,
                        std::size_t n);

}  // namespace brigade::model::io
