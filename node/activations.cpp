#include "node/activations.hpp"

#include <cstring>
#include <string>

namespace brigade::node {
namespace {

// Round to nearest even; NaN stays a (quiet) NaN.
std::uint16_t to_bf16(float f) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}

float from_bf16(std::uint16_t h) {
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f = 0;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace

void encode_activations(std::span<const float> values, mesh::ActivationDType dtype,
                        std::vector<std::uint8_t>& out) {
    if (dtype == mesh::ActivationDType::kF32) {
        out.resize(values.size() * 4);
        std::memcpy(out.data(), values.data(), out.size());
        return;
    }
    out.resize(values.size() * 2);
    std::uint8_t* p = out.data();
    for (float v : values) {
        const std::uint16_t h = to_bf16(v);
        p[0] = static_cast<std::uint8_t>(h & 0xff);
        p[1] = static_cast<std::uint8_t>(h >> 8);
        p += 2;
    }
}

model::Result<void> decode_activations(std::span<const std::uint8_t> bytes,
                                       mesh::ActivationDType dtype, std::size_t n_values,
                                       std::vector<float>& out) {
    const std::size_t width = mesh::activation_dtype_bytes(dtype);
    if (bytes.size() != n_values * width) {
        return model::make_error(model::errc::invalid_argument,
                                 "activation payload of " + std::to_string(bytes.size()) +
                                     " bytes, expected " + std::to_string(n_values * width));
    }
    out.resize(n_values);
    if (dtype == mesh::ActivationDType::kF32) {
        std::memcpy(out.data(), bytes.data(), bytes.size());
        return {};
    }
    for (std::size_t i = 0; i < n_values; ++i) {
        const auto h = static_cast<std::uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
        out[i] = from_bf16(h);
    }
    return {};
}

}  // namespace brigade::node
