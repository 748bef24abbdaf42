#pragma once
// MLX affine quantization of a float matrix (formats.md §2.4–2.5), for tests and benchmarks
// that build quantized checkpoints the way `mlx_lm.convert` does.

#include <cstdint>
#include <string>

#include "model/errors.hpp"

namespace brigade::model::io {

struct AffineQuantized {
    std::string weight;  // U32 [rows, cols * bits / 32], little-endian bytes
    std::string scales;  // [rows, cols / group_size] in `scale_dtype`
    std::string biases;  // same shape and dtype as scales
};

// Per group of `group_size` elements along a row: scale = max((max-min)/(2^b-1), 1e-7),
// signed so that the larger-magnitude edge is exactly representable; bias = that edge;
// q = clip(round((w - bias)/scale), 0, 2^b - 1); if the edge maps to code 0 it is kept as the
// bias, otherwise the bias is min. Computed in f32; scales/biases are then rounded to
// `scale_dtype` ("F32", "F16" or "BF16"). Codes are packed as one little-endian bit stream
// per row.
Result<AffineQuantized> quantize_affine(const float* w, std::int64_t rows, std::int64_t cols,
                                        int bits, int group_size, const std::string& scale_dtype);

}  // namespace brigade::model::io
