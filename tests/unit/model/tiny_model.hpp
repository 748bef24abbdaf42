#pragma once
// Test support: tiny random checkpoints written from C++ (config.json + safetensors), in any
// family, dtype or MLX quantization, optionally sharded, unaligned, or with chosen tensors
// overwritten by garbage. Header-only so both the model unit tests and the CLI tests use it.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/cpu/weight_decode.hpp"
#include "model/io/quantize.hpp"
#include "model/io/safetensors_writer.hpp"

namespace brigade::test {

struct TinyModelSpec {
    std::string model_type = "llama";
    int hidden = 64;
    int layers = 3;
    int heads = 4;
    int kv_heads = 2;
    int head_dim = 16;
    int intermediate = 128;
    int vocab = 96;
    bool tie = false;
    std::string dtype = "F32";  // F32, F16, BF16 (also the scales dtype when quantized)
    int bits = 0;               // 0 = not quantized; else MLX affine for every linear + embedding
    int group_size = 64;
    bool dequantized_floats = false;  // write dequant(quant(w)) as plain floats instead
    bool sharded = false;             // two shards + model.safetensors.index.json
    bool pad_header = true;           // false = MLX-style unaligned data
    std::uint64_t seed = 1;
    nlohmann::json extra_config = nlohmann::json::object();  // merged into config.json
    std::set<std::string> garbage;  // tensor names whose bytes are all 0xFF (NaN floats)
};

// Deterministic pseudo-random floats in [-scale, scale].
class TinyRng {
public:
    explicit TinyRng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
    float next(float scale) {
        state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
        const double u = static_cast<double>(state_ >> 11) * 0x1.0p-53;
        return static_cast<float>((2.0 * u - 1.0) * scale);
    }

private:
    std::uint64_t state_;
};

inline nlohmann::json tiny_config_json(const TinyModelSpec& s) {
    nlohmann::json c = {{"model_type", s.model_type},
                        {"hidden_size", s.hidden},
                        {"num_hidden_layers", s.layers},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"intermediate_size", s.intermediate},
                        {"vocab_size", s.vocab},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},
                        {"max_position_embeddings", 256},
                        {"tie_word_embeddings", s.tie},
                        {"bos_token_id", 1},
                        {"eos_token_id", 2}};
    if (s.bits != 0 && !s.dequantized_floats) {
        c["quantization"] = {{"bits", s.bits}, {"group_size", s.group_size}, {"mode", "affine"}};
        c["quantization_config"] = c["quantization"];
    }
    c.merge_patch(s.extra_config);
    return c;
}

// Writes the model into `dir` (created if needed).
inline void write_tiny_model(const std::filesystem::path& dir, const TinyModelSpec& s) {
    std::filesystem::create_directories(dir);
    { std::ofstream(dir / "config.json") << tiny_config_json(s).dump(2); }
    TinyRng rng(s.seed);
    std::vector<model::io::TensorToWrite> tensors;
    const std::int64_t q_dim = static_cast<std::int64_t>(s.heads) * s.head_dim;
    const std::int64_t kv_dim = static_cast<std::int64_t>(s.kv_heads) * s.head_dim;

    auto floats = [&](std::int64_t n, float scale, float offset) {
        std::vector<float> v(static_cast<std::size_t>(n));
        for (auto& x : v) x = offset + rng.next(scale);
        return v;
    };
    auto add_float = [&](const std::string& name, std::vector<std::int64_t> shape,
                         const std::vector<float>& v) {
        model::io::TensorToWrite t{name, s.dtype, std::move(shape), {}};
        model::io::append_float_bytes(t.bytes, s.dtype, v.data(), v.size());
        tensors.push_back(std::move(t));
    };
    // A linear weight [rows, cols] (or the embedding), quantized when asked.
    auto add_matrix = [&](const std::string& path, std::int64_t rows, std::int64_t cols,
                          float scale) {
        const auto w = floats(rows * cols, scale, 0.0f);
        if (s.bits == 0) {
            add_float(path + ".weight", {rows, cols}, w);
            return;
        }
        auto q = model::io::quantize_affine(w.data(), rows, cols, s.bits, s.group_size, s.dtype);
        if (!q) throw std::runtime_error(q.error().message);
        if (s.dequantized_floats) {
            model::WeightMatrix m;
            m.dtype = model::DType::kU32;
            m.rows = rows;
            m.cols = cols;
            m.data = q->weight.data();
            m.bits = s.bits;
            m.group_size = s.group_size;
            m.scale_dtype = s.dtype == "F32"   ? model::DType::kF32
                            : s.dtype == "F16" ? model::DType::kF16
                                               : model::DType::kBF16;
            m.scales = q->scales.data();
            m.biases = q->biases.data();
            std::vector<float> dq(static_cast<std::size_t>(rows * cols));
            for (std::int64_t r = 0; r < rows; ++r) model::cpu::dequantize_row(m, r, &dq[r * cols]);
            // Stored as F32 so the dequantized values are exact.
            model::io::TensorToWrite t{path + ".weight", "F32", {rows, cols}, {}};
            model::io::append_float_bytes(t.bytes, "F32", dq.data(), dq.size());
            tensors.push_back(std::move(t));
            return;
        }
        const std::int64_t groups = cols / s.group_size;
        tensors.push_back({path + ".weight", "U32", {rows, cols * s.bits / 32}, q->weight});
        tensors.push_back({path + ".scales", s.dtype, {rows, groups}, q->scales});
        tensors.push_back({path + ".biases", s.dtype, {rows, groups}, q->biases});
    };

    add_matrix("model.embed_tokens", s.vocab, s.hidden, 1.0f);
    for (int l = 0; l < s.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const float ws = 0.3f;
        add_float(p + "input_layernorm.weight", {s.hidden}, floats(s.hidden, 0.2f, 1.0f));
        add_float(p + "post_attention_layernorm.weight", {s.hidden}, floats(s.hidden, 0.2f, 1.0f));
        add_matrix(p + "self_attn.q_proj", q_dim, s.hidden, ws);
        add_matrix(p + "self_attn.k_proj", kv_dim, s.hidden, ws);
        add_matrix(p + "self_attn.v_proj", kv_dim, s.hidden, ws);
        add_matrix(p + "self_attn.o_proj", s.hidden, q_dim, ws);
        if (s.model_type == "qwen2") {
            add_float(p + "self_attn.q_proj.bias", {q_dim}, floats(q_dim, 0.5f, 0.0f));
            add_float(p + "self_attn.k_proj.bias", {kv_dim}, floats(kv_dim, 0.5f, 0.0f));
            add_float(p + "self_attn.v_proj.bias", {kv_dim}, floats(kv_dim, 0.5f, 0.0f));
        }
        if (s.model_type == "qwen3") {
            add_float(p + "self_attn.q_norm.weight", {s.head_dim}, floats(s.head_dim, 0.2f, 1.0f));
            add_float(p + "self_attn.k_norm.weight", {s.head_dim}, floats(s.head_dim, 0.2f, 1.0f));
        }
        add_matrix(p + "mlp.gate_proj", s.intermediate, s.hidden, ws);
        add_matrix(p + "mlp.up_proj", s.intermediate, s.hidden, ws);
        add_matrix(p + "mlp.down_proj", s.hidden, s.intermediate, ws);
    }
    add_float("model.norm.weight", {s.hidden}, floats(s.hidden, 0.2f, 1.0f));
    if (!s.tie) add_matrix("lm_head", s.vocab, s.hidden, 0.3f);

    for (auto& t : tensors) {
        if (s.garbage.count(t.name) != 0) t.bytes.assign(t.bytes.size(), '\xFF');
    }
    model::io::SafetensorsWriteOptions options;
    options.pad_header = s.pad_header;
    if (!s.sharded) {
        auto r = model::io::write_safetensors(dir / "model.safetensors", tensors, options);
        if (!r) throw std::runtime_error(r.error().message);
        return;
    }
    // Two shards split in the middle of the tensor list, plus the index.
    const std::size_t half = tensors.size() / 2;
    std::vector<model::io::TensorToWrite> a(tensors.begin(), tensors.begin() + half);
    std::vector<model::io::TensorToWrite> b(tensors.begin() + half, tensors.end());
    const std::string fa = "model-00001-of-00002.safetensors";
    const std::string fb = "model-00002-of-00002.safetensors";
    if (!model::io::write_safetensors(dir / fa, a, options) ||
        !model::io::write_safetensors(dir / fb, b, options)) {
        throw std::runtime_error("cannot write shards");
    }
    nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                            {"weight_map", nlohmann::json::object()}};
    for (const auto& t : a) index["weight_map"][t.name] = fa;
    for (const auto& t : b) index["weight_map"][t.name] = fb;
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
}

inline std::vector<float> read_f32_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::size_t>(in.tellg());
    in.seekg(0);
    std::vector<float> v(size / sizeof(float));
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return v;
}

inline float max_abs_diff(const float* a, const float* b, std::size_t n) {
    float m = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
        const float d = std::fabs(a[i] - b[i]);
        if (std::isnan(d)) return d;  // NaN fails every comparison with a tolerance
        if (d > m) m = d;
    }
    return m;
}

}  // namespace brigade::test
