#include "model/cpu/weight_decode.hpp"

#include <cmath>
#include <string>

namespace brigade::model::cpu {
namespace {

std::uint16_t load_u16(const void* base, std::int64_t index) {
    std::uint16_t h;
    std::memcpy(&h, static_cast<const std::uint8_t*>(base) + index * 2, sizeof h);
    return h;
}

bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace

float f16_to_f32(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1Fu;
    std::uint32_t mant = h & 0x3FFu;
    std::uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);  // 112 = 127 - 15
    } else if (mant == 0) {
        bits = sign;  // ±0
    } else {
        // Subnormal: value = mant * 2^-24; normalise it.
        int e = 113;  // exponent of 2^-14 in f32 bias terms is 113
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            --e;
        }
        mant &= 0x3FFu;
        bits = sign | (static_cast<std::uint32_t>(e) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

std::uint16_t f32_to_f16(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t abs = x & 0x7FFFFFFFu;
    if (abs >= 0x7F800000u) {  // inf or NaN
        return static_cast<std::uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to inf
    if (abs < 0x38800000u) {
        // Result is subnormal or zero: value / 2^-24 rounded to nearest even.
        float a;
        std::memcpy(&a, &abs, sizeof a);
        const float scaled = a * 16777216.0f;  // exact: multiply by 2^24
        const auto m = static_cast<std::uint32_t>(std::nearbyint(scaled));
        return static_cast<std::uint16_t>(sign | m);
    }
    // Normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even.
    std::uint32_t v = abs - 0x38000000u;  // exponent bias 127 -> 15
    const std::uint32_t round_bit = 0x1000u;
    const std::uint32_t lsb = (v >> 13) & 1u;
    v += round_bit - 1u + lsb;
    return static_cast<std::uint16_t>(sign | (v >> 13));
}

std::uint16_t f32_to_bf16(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    const std::uint32_t lsb = (x >> 16) & 1u;
    x += 0x7FFFu + lsb;
    return static_cast<std::uint16_t>(x >> 16);
}

float load_scalar(DType dtype, const void* base, std::int64_t index) {
    switch (dtype) {
        case DType::kF32: {
            float f;
            std::memcpy(&f, static_cast<const std::uint8_t*>(base) + index * 4, sizeof f);
            return f;
        }
        case DType::kF16:
            return f16_to_f32(load_u16(base, index));
        case DType::kBF16:
            return bf16_to_f32(load_u16(base, index));
        default:
            return 0.0f;
    }
}

Result<void> check_weight_format(const WeightMatrix& w) {
    if (!w.valid())
        return make_error(errc::invalid_argument, "weight matrix is empty or has no data");
    if (!w.quantized()) {
        if (is_float_dtype(w.dtype)) return {};
        return make_error(errc::unsupported_dtype,
                          "weight dtype " + std::string(dtype_name(w.dtype)) +
                              " is not supported (F32, F16, BF16 or MLX affine U32)");
    }
    const int b = w.bits;
    if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8) {
        return make_error(errc::unsupported_dtype,
                          "quantized weight has " + std::to_string(b) +
                              " bits; MLX affine supports 2, 3, 4, 5, 6, 8");
    }
    if (w.dtype != DType::kU32) {
        return make_error(errc::unsupported_dtype, "quantized weight must be stored as U32, got " +
                                                       std::string(dtype_name(w.dtype)));
    }
    const int g = w.group_size;
    if (g != 32 && g != 64 && g != 128) {
        return make_error(errc::unsupported_dtype, "quantization group size " + std::to_string(g) +
                                                       " is not one of 32, 64, 128");
    }
    if (w.cols % g != 0) {
        return make_error(errc::shape_mismatch, "quantized weight has " + std::to_string(w.cols) +
                                                    " columns, not a multiple of group size " +
                                                    std::to_string(g));
    }
    if (!is_float_dtype(w.scale_dtype)) {
        return make_error(errc::unsupported_dtype, "quantization scales dtype " +
                                                       std::string(dtype_name(w.scale_dtype)) +
                                                       " is not F32, F16 or BF16");
    }
    if (w.scales == nullptr || w.biases == nullptr) {
        return make_error(errc::missing_tensor, "quantized weight lacks scales or biases");
    }
    return {};
}

bool weight_format_supported(const WeightMatrix& w) { return check_weight_format(w).has_value(); }

bool vector_format_supported(const WeightVector& v) { return v.valid() && is_float_dtype(v.dtype); }

void dequantize_row(const WeightMatrix& w, std::int64_t row, float* out) {
    const std::int64_t cols = w.cols;
    if (!w.quantized()) {
        const auto* base = static_cast<const std::uint8_t*>(w.data) + row * w.row_bytes();
        for (std::int64_t c = 0; c < cols; ++c) out[c] = load_scalar(w.dtype, base, c);
        return;
    }
    const auto* packed = static_cast<const std::uint8_t*>(w.data) + row * w.row_bytes();
    const std::int64_t n_groups = cols / w.group_size;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        const float scale = load_scalar(w.scale_dtype, w.scales, row * n_groups + g);
        const float bias = load_scalar(w.scale_dtype, w.biases, row * n_groups + g);
        for (std::int64_t k = g * w.group_size; k < (g + 1) * w.group_size; ++k) {
            out[k] = scale * static_cast<float>(unpack_code(packed, w.bits, k)) + bias;
        }
    }
}

void decode_vector(const WeightVector& v, float* out) {
    for (std::int64_t i = 0; i < v.size; ++i) out[i] = load_scalar(v.dtype, v.data, i);
}

}  // namespace brigade::model::cpu
