#pragma once
// Scalar decoding of weights to f32: the half-precision formats and MLX affine quantization
// (formats.md §2.3–2.5). These are the definition of the numbers every kernel must reproduce;
// the reference backend, the engine and the tests use them directly.
//
// Weight bytes may sit at any address (MLX writes unpadded safetensors headers, formats.md
// §1.2), so every read goes through `std::memcpy`, never through a cast pointer.

#include <cstdint>
#include <cstring>

#include "model/errors.hpp"
#include "model/tensor.hpp"

namespace brigade::model::cpu {

// IEEE binary16 -> f32, exact (subnormals, inf and NaN included).
float f16_to_f32(std::uint16_t h);
// f32 -> binary16, round to nearest even; overflow gives inf.
std::uint16_t f32_to_f16(float f);
// The same, but magnitudes past the largest finite half (65504) give ±65504 (NaN stays NaN):
// how KV cache rows are stored (Backend::store_as).
inline std::uint16_t f32_to_f16_saturated(float f) {
    if (f > 65504.0f) f = 65504.0f;
    if (f < -65504.0f) f = -65504.0f;
    return f32_to_f16(f);
}

// bfloat16 is the top half of an f32, so widening is exact.
inline float bf16_to_f32(std::uint16_t h) {
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
// f32 -> bfloat16, round to nearest even (NaN stays NaN), as PyTorch's `.to(torch.bfloat16)`.
std::uint16_t f32_to_bf16(float f);

// Element `index` of an F32/F16/BF16 array at `base` (any alignment), as f32.
// Other dtypes give 0 (callers check `supports` first).
float load_scalar(DType dtype, const void* base, std::int64_t index);

// Whether a weight matrix is in a format the CPU backends compute with: F32/F16/BF16 plain,
// or MLX affine U32 with bits ∈ {2,3,4,5,6,8}, group ∈ {32,64,128} dividing `cols`, F32/F16/BF16
// scales and biases present.
bool weight_format_supported(const WeightMatrix& w);
// The same check with a sentence saying what is wrong, for loaders.
Result<void> check_weight_format(const WeightMatrix& w);
// Whether a vector (norm weight, bias) is F32, F16 or BF16 with data.
bool vector_format_supported(const WeightVector& v);

// The `bits`-bit code of element `k` of one packed row starting at `row` (any alignment):
// stream bits [k*bits, k*bits + bits), stream bit s = bit s%8 of byte s/8 (formats.md §2.4).
// Reads only bytes that hold bits of element k.
inline std::uint32_t unpack_code(const std::uint8_t* row, int bits, std::int64_t k) {
    const std::int64_t s = k * bits;
    const std::uint8_t* p = row + (s >> 3);
    const int shift = static_cast<int>(s & 7);
    std::uint32_t v = p[0];
    if (shift + bits > 8) v |= static_cast<std::uint32_t>(p[1]) << 8;
    return (v >> shift) & ((1u << bits) - 1u);
}

// Row `row` of `w` as f32 into out[w.cols]: plain dtypes are widened, quantized rows are
// w = scale * q + bias with scale and bias of the element's group (computed in f32).
void dequantize_row(const WeightMatrix& w, std::int64_t row, float* out);

// All `v.size` elements of a vector as f32 into out[v.size].
void decode_vector(const WeightVector& v, float* out);

}  // namespace brigade::model::cpu
