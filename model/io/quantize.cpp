#include "model/io/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/io/safetensors_writer.hpp"

namespace brigade::model::io {

Result<AffineQuantized> quantize_affine(const float* w, std::int64_t rows, std::int64_t cols,
                                        int bits, int group_size, const std::string& scale_dtype) {
    const bool bits_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
    if (!bits_ok) {
        return make_error(errc::invalid_argument, "quantize: " + std::to_string(bits) + " bits");
    }
    if (group_size != 32 && group_size != 64 && group_size != 128) {
        return make_error(errc::invalid_argument,
                          "quantize: group size " + std::to_string(group_size));
    }
    if (rows <= 0 || cols <= 0 || cols % group_size != 0) {
        return make_error(errc::invalid_argument, "quantize: " + std::to_string(cols) +
                                                      " columns are not a positive multiple of " +
                                                      std::to_string(group_size));
    }
    if (scale_dtype != "F32" && scale_dtype != "F16" && scale_dtype != "BF16") {
        return make_error(errc::invalid_argument, "quantize: scale dtype " + scale_dtype);
    }
    const float n_bins = static_cast<float>((1 << bits) - 1);
    const std::int64_t n_groups = cols / group_size;
    const std::int64_t row_bytes = cols * bits / 8;
    AffineQuantized out;
    out.weight.assign(static_cast<std::size_t>(rows * row_bytes), '\0');
    std::vector<float> scales(static_cast<std::size_t>(rows * n_groups));
    std::vector<float> biases(scales.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        auto* packed = reinterpret_cast<unsigned char*>(out.weight.data()) + r * row_bytes;
        for (std::int64_t g = 0; g < n_groups; ++g) {
            const float* x = w + r * cols + g * group_size;
            const float w_max = *std::max_element(x, x + group_size);
            const float w_min = *std::min_element(x, x + group_size);
            const bool min_is_edge = std::fabs(w_min) > std::fabs(w_max);
            float scale = std::max((w_max - w_min) / n_bins, 1e-7f);
            if (!min_is_edge) scale = -scale;
            const float edge = min_is_edge ? w_min : w_max;
            const float q0 = std::nearbyint(edge / scale);
            float bias = 0.0f;
            if (q0 != 0.0f) {
                scale = edge / q0;  // so that the edge (and 0.0) are exactly representable
                bias = edge;
            }
            scales[static_cast<std::size_t>(r * n_groups + g)] = scale;
            biases[static_cast<std::size_t>(r * n_groups + g)] = bias;
            for (int i = 0; i < group_size; ++i) {
                const float q = std::clamp(std::nearbyint((x[i] - bias) / scale), 0.0f, n_bins);
                const auto code = static_cast<std::uint32_t>(q);
                // Element k of the row occupies stream bits [k*bits, k*bits + bits).
                const std::int64_t s = (g * group_size + i) * bits;
                for (int b = 0; b < bits; ++b) {
                    if ((code >> b) & 1u)
                        packed[(s + b) >> 3] |= static_cast<unsigned char>(1u << ((s + b) & 7));
                }
            }
        }
    }
    append_float_bytes(out.scales, scale_dtype, scales.data(), scales.size());
    append_float_bytes(out.biases, scale_dtype, biases.data(), biases.size());
    return out;
}

}  // namespace brigade::model::io
