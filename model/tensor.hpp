#pragma once
// Non-owning views of weights as a backend consumes them. The bytes usually live in a
// memory-mapped checkpoint (CPU) or in device memory after `Backend::upload` (GPU); they may be
// unaligned because MLX writes unpadded safetensors headers (formats.md §1.2).

#include <cstdint>

#include "model/types.hpp"

namespace brigade::model {

// A 1-D parameter such as a norm weight or an additive bias. F32, F16 or BF16.
struct WeightVector {
    DType dtype = DType::kF32;
    std::int64_t size = 0;
    const void* data = nullptr;  // [size]

    bool valid() const { return data != nullptr && size > 0; }
};

// A linear layer's weight in Hugging Face layout `[rows = out_features, cols = in_features]`,
// used as y = x · Wᵀ, or an embedding table `[rows = vocab, cols = hidden]`.
//
// Plain weights: `dtype` is F32, F16 or BF16 and `data` holds rows*cols elements row-major.
// MLX affine quantization (formats.md §2): `bits` ∈ {2,3,4,5,6,8}, `dtype` is U32 and `data`
// holds rows * (cols*bits/32) packed words, each row one little-endian bit stream;
// `scales`/`biases` are `[rows, cols/group_size]` of `scale_dtype` and w = scale*q + bias.
struct WeightMatrix {
    DType dtype = DType::kF32;
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    const void* data = nullptr;

    int bits = 0;  // 0 = not quantized
    int group_size = 0;
    DType scale_dtype = DType::kF32;
    const void* scales = nullptr;
    const void* biases = nullptr;

    bool quantized() const { return bits != 0; }
    bool valid() const { return data != nullptr && rows > 0 && cols > 0; }
    // Bytes of one packed row (quantized) or of one plain row.
    std::int64_t row_bytes() const {
        return quantized() ? cols * bits / 8
                           : cols * static_cast<std::int64_t>(dtype_bits(dtype) / 8);
    }
    // Bytes a matmul reads: the weight plus its scales and biases.
    std::int64_t total_bytes() const {
        std::int64_t bytes = rows * row_bytes();
        if (quantized()) {
            bytes += 2 * rows * (cols / group_size) *
                     static_cast<std::int64_t>(dtype_bits(scale_dtype) / 8);
        }
        return bytes;
    }
};

}  // namespace brigade::model
