#pragma once
// Vocabulary types of the model module. Header-only with no dependencies, so that mesh/ may
// include it (house guide §1) to plan layer splits without seeing any engine code.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace brigade::model {

// Element types that can appear in a checkpoint. Quantized MLX weights are stored as U32.
enum class DType : std::uint8_t {
    kF32,
    kF16,
    kBF16,
    kF64,
    kU8,
    kI8,
    kU16,
    kI16,
    kU32,
    kI32,
    kU64,
    kI64,
    kBool,
    kF8E4M3,
    kF8E5M2,
};

constexpr std::size_t dtype_bits(DType t) {
    switch (t) {
        case DType::kF64:
        case DType::kU64:
        case DType::kI64:
            return 64;
        case DType::kF32:
        case DType::kU32:
        case DType::kI32:
            return 32;
        case DType::kF16:
        case DType::kBF16:
        case DType::kU16:
        case DType::kI16:
            return 16;
        case DType::kU8:
        case DType::kI8:
        case DType::kBool:
        case DType::kF8E4M3:
        case DType::kF8E5M2:
            return 8;
    }
    return 0;
}

// Bytes of one K or V element of a KV cache of this dtype: F16, or F32 (anything else is
// taken as F32).
constexpr std::uint64_t kv_element_bytes(DType dtype) {
    return dtype_bits(dtype == DType::kF16 ? DType::kF16 : DType::kF32) / 8;
}

constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kF32:
            return "F32";
        case DType::kF16:
            return "F16";
        case DType::kBF16:
            return "BF16";
        case DType::kF64:
            return "F64";
        case DType::kU8:
            return "U8";
        case DType::kI8:
            return "I8";
        case DType::kU16:
            return "U16";
        case DType::kI16:
            return "I16";
        case DType::kU32:
            return "U32";
        case DType::kI32:
            return "I32";
        case DType::kU64:
            return "U64";
        case DType::kI64:
            return "I64";
        case DType::kBool:
            return "BOOL";
        case DType::kF8E4M3:
            return "F8_E4M3";
        case DType::kF8E5M2:
            return "F8_E5M2";
    }
    return "?";
}

// A half-open range of decoder layers [first, last) run by one pipeline stage.
struct LayerRange {
    int first = 0;
    int last = 0;

    constexpr int size() const { return last - first; }
    constexpr bool empty() const { return last <= first; }
    constexpr bool contains(int layer) const { return layer >= first && layer < last; }
    constexpr bool operator==(const LayerRange&) const = default;
};

// What a planner needs to know about a model to split it; no weights, no config parsing.
struct ModelShape {
    int n_layers = 0;
    int hidden_size = 0;
    int vocab_size = 0;
    std::vector<std::uint64_t> layer_bytes;  // [n_layers] bytes of weights per decoder layer
    std::uint64_t embedding_bytes = 0;       // token embedding (needed by the head stage)
    std::uint64_t lm_head_bytes = 0;         // final norm + lm_head (0 extra when tied)
    std::uint64_t kv_bytes_per_token_per_layer = 0;  // K and V for one token in one layer
};

}  // namespace brigade::model
