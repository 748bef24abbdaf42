#include "model/model_config.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace brigade::model {
namespace {

using nlohmann::json;

Error config_error(const std::string& source, const std::string& what) {
    return make_error(errc::bad_config, source + ": " + what);
}

// Integer key that must be present and positive.
Result<int> require_int(const json& j, const char* key, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return config_error(source, std::string("missing required key \"") + key + "\"");
    }
    if (!it->is_number_integer() && !it->is_number_unsigned()) {
        return config_error(source, std::string("key \"") + key + "\" must be an integer");
    }
    const auto v = it->get<std::int64_t>();
    if (v <= 0 || v > (1LL << 30)) {
        return config_error(
            source, std::string("key \"") + key + "\" = " + std::to_string(v) + " is out of range");
    }
    return static_cast<int>(v);
}

// Optional integer key: `fallback` when absent or null.
Result<int> optional_int(const json& j, const char* key, int fallback, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    return require_int(j, key, source);
}

Result<double> optional_number(const json& j, const char* key, double fallback,
                               const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number()) {
        return config_error(source, std::string("key \"") + key + "\" must be a number");
    }
    return it->get<double>();
}

Result<bool> optional_bool(const json& j, const char* key, bool fallback,
                           const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
        return config_error(source, std::string("key \"") + key + "\" must be true or false");
    }
    return it->get<bool>();
}

// `eos_token_id` is an int or a list of ints.
Result<std::vector<int>> token_id_list(const json& j, const char* key, const std::string& source) {
    std::vector<int> ids;
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return ids;
    auto add = [&](const json& v) -> Result<void> {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
            return config_error(source, std::string("key \"") + key +
                                            "\" must be a token id or a list of token ids");
        }
        ids.push_back(static_cast<int>(v.get<std::int64_t>()));
        return {};
    };
    if (it->is_array()) {
        for (const auto& v : *it) {
            if (auto r = add(v); !r) return r.error();
        }
    } else if (auto r = add(*it); !r) {
        return r.error();
    }
    return ids;
}

// Parses a rope_scaling / rope_parameters object. `default` or an absent type = no scaling.
Result<RopeScaling> parse_rope_scaling(const json& rs, const std::string& source, const char* key) {
    RopeScaling out;
    if (rs.is_null()) return out;
    if (!rs.is_object()) return config_error(source, std::string(key) + " must be an object");
    std::string type = "default";
    if (auto it = rs.find("rope_type"); it != rs.end() && it->is_string()) {
        type = it->get<std::string>();
    } else if (auto it2 = rs.find("type"); it2 != rs.end() && it2->is_string()) {
        type = it2->get<std::string>();
    }
    auto factor = optional_number(rs, "factor", 1.0, source);
    if (!factor) return factor.error();
    if (type == "default") return out;
    if (*factor <= 0.0) {
        return config_error(source, std::string(key) + ".factor must be positive");
    }
    if (type == "linear") {
        out.kind = RopeScaling::Kind::kLinear;
        out.factor = *factor;
        return out;
    }
    if (type == "llama3") {
        out.kind = RopeScaling::Kind::kLlama3;
        out.factor = *factor;
        auto low = optional_number(rs, "low_freq_factor", 1.0, source);
        auto high = optional_number(rs, "high_freq_factor", 4.0, source);
        auto orig = optional_number(rs, "original_max_position_embeddings", 8192.0, source);
        if (!low) return low.error();
        if (!high) return high.error();
        if (!orig) return orig.error();
        if (*high <= *low || *low <= 0.0 || *orig <= 0.0) {
            return config_error(source, std::string(key) +
                                            ": llama3 needs 0 < low_freq_factor < "
                                            "high_freq_factor and a positive "
                                            "original_max_position_embeddings");
        }
        out.low_freq_factor = *low;
        out.high_freq_factor = *high;
        out.original_max_position_embeddings = *orig;
        return out;
    }
    return make_error(errc::unsupported_architecture,
                      source + ": " + key + " type \"" + type +
                          "\" is not supported (supported: default, linear, llama3)");
}

Result<QuantParams> parse_quant_params(const json& q, const QuantParams& fallback,
                                       const std::string& where, const std::string& source) {
    QuantParams p = fallback;
    if (auto it = q.find("mode"); it != q.end() && !it->is_null()) {
        if (!it->is_string() || it->get<std::string>() != "affine") {
            return make_error(errc::unsupported_architecture,
                              source + ": quantization mode " + it->dump() + " of " + where +
                                  " is not supported (only \"affine\")");
        }
    }
    auto bits = optional_int(q, "bits", fallback.bits, source);
    auto group = optional_int(q, "group_size", fallback.group_size, source);
    if (!bits) return bits.error();
    if (!group) return group.error();
    p.bits = *bits;
    p.group_size = *group;
    const bool bits_ok =
        p.bits == 2 || p.bits == 3 || p.bits == 4 || p.bits == 5 || p.bits == 6 || p.bits == 8;
    if (!bits_ok) {
        return make_error(errc::unsupported_architecture,
                          source + ": quantization of " + where + " uses " +
                              std::to_string(p.bits) + " bits (supported: 2, 3, 4, 5, 6, 8)");
    }
    if (p.group_size != 32 && p.group_size != 64 && p.group_size != 128) {
        return make_error(errc::unsupported_architecture,
                          source + ": quantization of " + where + " uses group_size " +
                              std::to_string(p.group_size) + " (supported: 32, 64, 128)");
    }
    return p;
}

Result<std::optional<QuantizationConfig>> parse_quantization(const json& j,
                                                             const std::string& source) {
    const json* q = nullptr;
    if (auto it = j.find("quantization"); it != j.end() && !it->is_null()) {
        q = &*it;
    } else if (auto it2 = j.find("quantization_config"); it2 != j.end() && !it2->is_null()) {
        if (it2->is_object() && it2->contains("quant_method")) {
            // HF-native schemes (awq, gptq, compressed-tensors, ...) need repacking we do not do.
            return make_error(errc::unsupported_architecture,
                              source + ": quantization_config.quant_method " +
                                  (*it2)["quant_method"].dump() +
                                  " is not supported (only MLX affine \"quantization\")");
        }
        q = &*it2;
    }
    if (q == nullptr) return std::optional<QuantizationConfig>{};
    if (!q->is_object()) return config_error(source, "\"quantization\" must be an object");
    QuantizationConfig qc;
    auto global = parse_quant_params(*q, QuantParams{}, "the model", source);
    if (!global) return global.error();
    qc.global = *global;
    for (const auto& [key, value] : q->items()) {
        if (key == "bits" || key == "group_size" || key == "mode") continue;
        if (value.is_boolean()) {
            if (value.get<bool>()) {
                qc.overrides[key] = qc.global;
            } else {
                qc.overrides[key] = std::nullopt;
            }
        } else if (value.is_object()) {
            // A per-module dict without "mode" means affine (formats.md §2.1); parse_quant_params
            // accepts an absent mode as affine.
            auto p = parse_quant_params(value, qc.global, "\"" + key + "\"", source);
            if (!p) return p.error();
            qc.overrides[key] = *p;
        } else {
            return config_error(source,
                                "quantization entry \"" + key + "\" must be false or an object");
        }
    }
    return std::optional<QuantizationConfig>{std::move(qc)};
}

}  // namespace

std::optional<QuantParams> ModelConfig::quant_params_for(const std::string& path) const {
    if (!quantization) return std::nullopt;
    if (auto it = quantization->overrides.find(path); it != quantization->overrides.end()) {
        return it->second;
    }
    return quantization->global;
}

Result<void> validate_model_config(const ModelConfig& c, const std::string& source) {
    if (c.n_heads % c.n_kv_heads != 0) {
        return config_error(source, "num_attention_heads (" + std::to_string(c.n_heads) +
                                        ") is not a multiple of num_key_value_heads (" +
                                        std::to_string(c.n_kv_heads) + ")");
    }
    if (c.head_dim % 2 != 0) {
        return config_error(source,
                            "head_dim " + std::to_string(c.head_dim) + " must be even for RoPE");
    }
    if (c.rms_norm_eps <= 0.0) return config_error(source, "rms_norm_eps must be positive");
    if (c.rope_theta <= 0.0) return config_error(source, "rope_theta must be positive");
    for (int id : c.eos_token_ids) {
        if (id >= c.vocab_size) {
            return config_error(source, "eos_token_id " + std::to_string(id) +
                                            " is not below vocab_size " +
                                            std::to_string(c.vocab_size));
        }
    }
    return {};
}

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
    const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return make_error(errc::bad_config, source + ": not valid JSON");
    if (!j.is_object()) return config_error(source, "top level must be a JSON object");

    ModelConfig c;
    auto mt = j.find("model_type");
    if (mt == j.end() || !mt->is_string()) {
        return config_error(source, "missing required key \"model_type\"");
    }
    c.model_type = mt->get<std::string>();
    if (c.model_type == "llama") {
        c.family = ModelFamily::kLlama;
    } else if (c.model_type == "mistral") {
        c.family = ModelFamily::kMistral;
    } else if (c.model_type == "qwen2") {
        c.family = ModelFamily::kQwen2;
    } else if (c.model_type == "qwen3") {
        c.family = ModelFamily::kQwen3;
    } else if (c.model_type == "phi3") {
        c.family = ModelFamily::kPhi3;
    } else {
        return make_error(errc::unsupported_architecture,
                          source + ": model_type \"" + c.model_type +
                              "\" is not supported (supported: llama, mistral, qwen2, qwen3, "
                              "phi3)");
    }

#define BRIGADE_TRY_ASSIGN(dst, expr) \
    do {                              \
        auto r_ = (expr);             \
        if (!r_) return r_.error();   \
        dst = *r_;                    \
    } while (0)

    BRIGADE_TRY_ASSIGN(c.hidden_size, require_int(j, "hidden_size", source));
    BRIGADE_TRY_ASSIGN(c.n_layers, require_int(j, "num_hidden_layers", source));
    BRIGADE_TRY_ASSIGN(c.n_heads, require_int(j, "num_attention_heads", source));
    BRIGADE_TRY_ASSIGN(c.n_kv_heads, optional_int(j, "num_key_value_heads", c.n_heads, source));
    BRIGADE_TRY_ASSIGN(c.intermediate_size, require_int(j, "intermediate_size", source));
    BRIGADE_TRY_ASSIGN(c.vocab_size, require_int(j, "vocab_size", source));
    if (c.family == ModelFamily::kQwen3 && (!j.contains("head_dim") || j["head_dim"].is_null())) {
        // Qwen3's head_dim differs from hidden/heads (0.6B: 128 vs 64), so guessing is wrong.
        return config_error(source, "missing required key \"head_dim\" (qwen3)");
    }
    if (c.hidden_size % c.n_heads != 0 && (!j.contains("head_dim") || j["head_dim"].is_null())) {
        return config_error(source,
                            "no \"head_dim\" and hidden_size is not a multiple of "
                            "num_attention_heads");
    }
    BRIGADE_TRY_ASSIGN(c.head_dim, optional_int(j, "head_dim", c.hidden_size / c.n_heads, source));
    c.rope_dims = c.head_dim;
    BRIGADE_TRY_ASSIGN(c.max_position_embeddings,
                       optional_int(j, "max_position_embeddings", 2048, source));
    BRIGADE_TRY_ASSIGN(c.rms_norm_eps, optional_number(j, "rms_norm_eps", 1e-6, source));
    BRIGADE_TRY_ASSIGN(c.tie_word_embeddings,
                       optional_bool(j, "tie_word_embeddings", false, source));

    // RoPE: transformers v5 writes `rope_parameters` {rope_type, rope_theta, ...}, possibly
    // keyed by layer type; older configs `rope_theta` + `rope_scaling`.
    BRIGADE_TRY_ASSIGN(c.rope_theta, optional_number(j, "rope_theta", 10000.0, source));
    if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
        const json* params = &*rp;
        if (rp->is_object() && !rp->contains("rope_type") && !rp->contains("rope_theta") &&
            rp->contains("full_attention")) {
            params = &(*rp)["full_attention"];
        }
        if (!params->is_object()) return config_error(source, "rope_parameters must be an object");
        BRIGADE_TRY_ASSIGN(c.rope_theta,
                           optional_number(*params, "rope_theta", c.rope_theta, source));
        BRIGADE_TRY_ASSIGN(c.rope_scaling, parse_rope_scaling(*params, source, "rope_parameters"));
    } else if (auto rs = j.find("rope_scaling"); rs != j.end()) {
        BRIGADE_TRY_ASSIGN(c.rope_scaling, parse_rope_scaling(*rs, source, "rope_scaling"));
    }

    bool attention_bias = false;
    BRIGADE_TRY_ASSIGN(attention_bias, optional_bool(j, "attention_bias", false, source));
    switch (c.family) {
        case ModelFamily::kLlama:
        case ModelFamily::kMistral:
            c.qkv_bias = attention_bias;
            c.o_bias = attention_bias;
            BRIGADE_TRY_ASSIGN(c.mlp_bias, optional_bool(j, "mlp_bias", false, source));
            break;
        case ModelFamily::kQwen2:
            // HF Qwen2Attention: q/k/v always have a bias, o_proj never.
            c.qkv_bias = true;
            break;
        case ModelFamily::kQwen3:
            c.qkv_bias = attention_bias;
            c.o_bias = attention_bias;
            c.qk_norm = true;
            break;
        case ModelFamily::kPhi3: {
            // HF Phi3: no biases; q, k, v and gate, up each one fused weight. Its
            // `sliding_window` is ignored, as for Mistral (formats.md §3). RoPE may rotate only
            // int(head_dim * partial_rotary_factor) dims of each head (Phi-4-mini: 0.75).
            c.fused_projections = true;
            // At the top level in Hub configs; transformers 5 may write it in rope_parameters.
            double rotary = 1.0;
            if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
                BRIGADE_TRY_ASSIGN(rotary,
                                   optional_number(*rp, "partial_rotary_factor", 1.0, source));
            }
            BRIGADE_TRY_ASSIGN(rotary, optional_number(j, "partial_rotary_factor", rotary, source));
            const auto dims = static_cast<int>(c.head_dim * rotary);
            if (!(rotary > 0.0 && rotary <= 1.0) || dims < 2 || dims % 2 != 0) {
                return config_error(source, "partial_rotary_factor " + std::to_string(rotary) +
                                                " leaves " + std::to_string(dims) + " of " +
                                                std::to_string(c.head_dim) +
                                                " head dims to rotate (needs an even number >= "
                                                "2, factor in (0, 1])");
            }
            c.rope_dims = dims;
            break;
        }
    }

    if (auto bos = j.find("bos_token_id"); bos != j.end() && bos->is_number_integer()) {
        c.bos_token_id = bos->get<int>();
    }
    BRIGADE_TRY_ASSIGN(c.eos_token_ids, token_id_list(j, "eos_token_id", source));
    BRIGADE_TRY_ASSIGN(c.quantization, parse_quantization(j, source));
#undef BRIGADE_TRY_ASSIGN

    if (auto v = validate_model_config(c, source); !v) return v.error();
    return c;
}

Result<ModelConfig> load_model_config(const std::filesystem::path& dir) {
    const auto path = dir / "config.json";
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(errc::io_error, path.string() + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    auto config = parse_model_config(ss.str(), path.string());
    if (!config) return config;

    const auto gen_path = dir / "generation_config.json";
    std::ifstream gen(gen_path, std::ios::binary);
    if (gen) {
        std::stringstream gs;
        gs << gen.rdbuf();
        const json g = json::parse(gs.str(), nullptr, false);
        if (g.is_discarded() || !g.is_object()) {
            return make_error(errc::bad_config, gen_path.string() + ": not a valid JSON object");
        }
        auto ids = token_id_list(g, "eos_token_id", gen_path.string());
        if (!ids) return ids.error();
        for (int id : *ids) {
            bool known = false;
            for (int e : config->eos_token_ids) known = known || e == id;
            if (!known && id < config->vocab_size) config->eos_token_ids.push_back(id);
        }
    }
    return config;
}

}  // namespace brigade::model
