#pragma once
// Test-side builders of weight matrices in every supported format, written independently of
// model/cpu/weight_decode so that the decoder is checked against a second implementation.

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "model/cpu/weight_decode.hpp"
#include "model/tensor.hpp"

namespace brigade::model::cpu::test {

// Reads bit `s` of a byte stream the slow way (formats.md §2.4: bit s%8 of byte s/8).
inline std::uint32_t naive_stream_bit(const std::vector<std::uint8_t>& bytes, std::int64_t s) {
    return (bytes[static_cast<std::size_t>(s / 8)] >> (s % 8)) & 1u;
}

// Element k of a b-bit stream assembled bit by bit, least significant first.
inline std::uint32_t naive_code(const std::vector<std::uint8_t>& bytes, int bits, std::int64_t k) {
    std::uint32_t v = 0;
    for (int i = 0; i < bits; ++i) v |= naive_stream_bit(bytes, k * bits + i) << i;
    return v;
}

// Packs codes into a bit stream bit by bit (the inverse of `naive_code`).
inline void pack_codes(const std::vector<std::uint32_t>& codes, int bits,
                       std::vector<std::uint8_t>& bytes, std::size_t byte_offset) {
    for (std::size_t k = 0; k < codes.size(); ++k) {
        for (int i = 0; i < bits; ++i) {
            const std::size_t s = k * static_cast<std::size_t>(bits) + static_cast<std::size_t>(i);
            if ((codes[k] >> i) & 1u)
                bytes[byte_offset + s / 8] |= static_cast<std::uint8_t>(1u << (s % 8));
        }
    }
}

// Owns the bytes of a WeightMatrix; `misalign` shifts every array off its natural alignment.
struct OwnedWeight {
    std::vector<std::uint8_t> data, scales, biases;
    WeightMatrix view;
    std::vector<float> dense;  // [rows, cols] the values the matrix stands for, computed here
    // Quantized only: the codes [rows, cols] and the decoded scale of each group [rows, groups].
    std::vector<std::uint32_t> codes;
    std::vector<float> group_scale;
};

inline void store_scalar(DType t, float v, std::uint8_t* dst) {
    if (t == DType::kF32) {
        std::memcpy(dst, &v, 4);
    } else {
        const std::uint16_t h = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(dst, &h, 2);
    }
}

inline float round_trip(DType t, float v) {
    std::uint8_t buf[4];
    store_scalar(t, v, buf);
    return load_scalar(t, buf, 0);
}

// A plain F32/F16/BF16 matrix of random values in [-1, 1).
inline OwnedWeight make_plain_weight(DType dtype, std::int64_t rows, std::int64_t cols,
                                     std::uint32_t seed, int misalign = 0) {
    OwnedWeight w;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const std::size_t elem = dtype == DType::kF32 ? 4 : 2;
    w.data.assign(static_cast<std::size_t>(rows * cols) * elem + 8, 0);
    w.dense.resize(static_cast<std::size_t>(rows * cols));
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        const float v = dist(rng);
        store_scalar(dtype, v, w.data.data() + misalign + static_cast<std::size_t>(i) * elem);
        w.dense[static_cast<std::size_t>(i)] = round_trip(dtype, v);
    }
    w.view.dtype = dtype;
    w.view.rows = rows;
    w.view.cols = cols;
    w.view.data = w.data.data() + misalign;
    return w;
}

// An MLX affine quantized matrix with random codes, scales and biases; `dense` holds
// scale*q + bias computed in f32 from the rounded scale and bias.
inline OwnedWeight make_quant_weight(int bits, int group, DType scale_dtype, std::int64_t rows,
                                     std::int64_t cols, std::uint32_t seed, int misalign = 0) {
    OwnedWeight w;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::uint32_t> code_dist(0, (1u << bits) - 1u);
    std::uniform_real_distribution<float> scale_dist(0.001f, 0.05f);
    std::uniform_real_distribution<float> bias_dist(-0.5f, 0.5f);
    const std::size_t row_bytes = static_cast<std::size_t>(cols * bits / 8);
    const std::int64_t n_groups = cols / group;
    const std::size_t selem = scale_dtype == DType::kF32 ? 4 : 2;
    w.data.assign(static_cast<std::size_t>(rows) * row_bytes + 8, 0);
    w.scales.assign(static_cast<std::size_t>(rows * n_groups) * selem + 8, 0);
    w.biases.assign(static_cast<std::size_t>(rows * n_groups) * selem + 8, 0);
    w.dense.resize(static_cast<std::size_t>(rows * cols));
    w.group_scale.resize(static_cast<std::size_t>(rows * n_groups));
    for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<std::uint32_t> codes(static_cast<std::size_t>(cols));
        for (auto& c : codes) c = code_dist(rng);
        w.codes.insert(w.codes.end(), codes.begin(), codes.end());
        pack_codes(codes, bits, w.data, static_cast<std::size_t>(misalign) + r * row_bytes);
        for (std::int64_t g = 0; g < n_groups; ++g) {
            const std::size_t gi = static_cast<std::size_t>(r * n_groups + g);
            store_scalar(scale_dtype, scale_dist(rng), w.scales.data() + misalign + gi * selem);
            store_scalar(scale_dtype, bias_dist(rng), w.biases.data() + misalign + gi * selem);
            const float s =
                load_scalar(scale_dtype, w.scales.data() + misalign, static_cast<std::int64_t>(gi));
            const float b =
                load_scalar(scale_dtype, w.biases.data() + misalign, static_cast<std::int64_t>(gi));
            w.group_scale[gi] = s;
            for (std::int64_t k = g * group; k < (g + 1) * group; ++k) {
                w.dense[static_cast<std::size_t>(r * cols + k)] =
                    s * static_cast<float>(codes[static_cast<std::size_t>(k)]) + b;
            }
        }
    }
    w.view.dtype = DType::kU32;
    w.view.rows = rows;
    w.view.cols = cols;
    w.view.data = w.data.data() + misalign;
    w.view.bits = bits;
    w.view.group_size = group;
    w.view.scale_dtype = scale_dtype;
    w.view.scales = w.scales.data() + misalign;
    w.view.biases = w.biases.data() + misalign;
    return w;
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

}  // namespace brigade::model::cpu::test
