#pragma once
// Hyper-parameters of a decoder-only transformer, read from a Hugging Face `config.json`
// (formats.md §3). Supported families: `llama`, `mistral`, `qwen2`, `qwen3`.
//
// Defaults for absent keys follow Hugging Face transformers (not mlx-lm): notably
// `tie_word_embeddings` defaults to false for every supported family (formats.md §3.2).

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "model/types.hpp"

namespace brigade::model {

enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3, kPhi3 };

// RoPE frequency scaling (formats.md §3.3). `default` and `null` both mean kNone.
struct RopeScaling {
    enum class Kind { kNone, kLinear, kLlama3 };
    Kind kind = Kind::kNone;
    double factor = 1.0;
    double low_freq_factor = 1.0;                    // llama3
    double high_freq_factor = 4.0;                   // llama3
    double original_max_position_embeddings = 8192;  // llama3
};

// MLX affine quantization parameters of one module (formats.md §2.1).
struct QuantParams {
    int bits = 4;
    int group_size = 64;
};

// The `"quantization"` object: global defaults plus per-module overrides keyed by module path
// (e.g. `model.layers.3.self_attn.v_proj`, no `.weight` suffix). An override of `false` is
// stored as std::nullopt: that module is not quantized.
struct QuantizationConfig {
    QuantParams global;
    std::map<std::string, std::optional<QuantParams>> overrides;
};

struct ModelConfig {
    std::string model_type;  // as written in config.json
    ModelFamily family = ModelFamily::kLlama;

    int hidden_size = 0;
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;  // explicit `head_dim`, else hidden_size / n_heads
    // Dims of each head that RoPE rotates (the first ones): head_dim, or the
    // `partial_rotary_factor` share of it (phi3); the rest pass through unrotated.
    int rope_dims = 0;
    int intermediate_size = 0;
    int vocab_size = 0;
    int max_position_embeddings = 0;

    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    double rms_norm_eps = 1e-6;

    bool tie_word_embeddings = false;
    bool qkv_bias = false;  // bias on q/k/v projections (qwen2 always; llama `attention_bias`)
    bool o_bias = false;    // bias on o_proj (llama/mistral `attention_bias`)
    bool mlp_bias = false;  // bias on gate/up/down (llama `mlp_bias`)
    bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (qwen3)
    // One `qkv_proj` weight with q, k and v stacked by rows, and one `gate_up_proj` with gate
    // then up (phi3); the stage takes views of the rows.
    bool fused_projections = false;

    std::optional<int> bos_token_id;
    std::vector<int> eos_token_ids;  // config.json, merged with generation_config.json

    std::optional<QuantizationConfig> quantization;  // absent = plain F32/F16/BF16 weights

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }

    // Quantization of the module at `path` (no `.weight` suffix): nullopt when the config says
    // it is not quantized. Only meaningful when the checkpoint holds `<path>.scales`.
    std::optional<QuantParams> quant_params_for(const std::string& path) const;
};

// Parses config.json text. `source` names the file in error messages.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);

// Reads `<dir>/config.json` and, when present, merges `eos_token_id` from
// `<dir>/generation_config.json` (mlx-lm does the same; Llama-3 instruct stops on several ids).
Result<ModelConfig> load_model_config(const std::filesystem::path& dir);

// Checks that hyper-parameters are positive and consistent (heads divide, etc.).
Result<void> validate_model_config(const ModelConfig& c, const std::string& source);

}  // namespace brigade::model
