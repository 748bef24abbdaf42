#include "model/weights.hpp"

#include <charconv>
#include <set>

namespace brigade::model {
namespace {

// "[a, b]" for an error message. (Appends: GCC 12 warns falsely on "[" + std::string.)
std::string shape_text(std::initializer_list<std::int64_t> dims) {
    std::string out = "[";
    for (std::int64_t d : dims) {
        if (out.size() > 1) out.append(", ");
        out.append(std::to_string(d));
    }
    return out.append("]");
}

bool is_float_dtype(const io::TensorInfo& t) {
    return t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16;
}

// Builds views and checks them; remembers the tensors used for byte accounting.
class StageLoader {
public:
    StageLoader(io::Checkpoint& checkpoint, const ModelConfig& config)
        : checkpoint_(checkpoint), config_(config) {}

    std::uint64_t n_bytes() const { return n_bytes_; }

    Result<const io::TensorInfo*> get(const std::string& name) {
        auto t = checkpoint_.tensor(name);
        if (!t) return t.error();
        if (used_.insert(name).second) n_bytes_ += (*t)->n_bytes();
        return *t;
    }

    std::string where(const std::string& name) const {
        auto file = checkpoint_.file_of(name);
        return (file.empty() ? checkpoint_.dir().string() : file.string()) + ": tensor \"" + name +
               "\"";
    }

    Error shape_error(const io::TensorInfo& t, const std::string& expected) const {
        return make_error(errc::shape_mismatch, where(t.name) + " has shape " + t.shape_string() +
                                                    ", expected " + expected);
    }

    Result<WeightVector> vector(const std::string& name, std::int64_t size) {
        auto t = get(name);
        if (!t) return t.error();
        const io::TensorInfo& info = **t;
        if (!is_float_dtype(info)) {
            return make_error(
                errc::unsupported_dtype,
                where(name) + " has dtype " + info.dtype_name + " (expected F32, F16 or BF16)");
        }
        if (info.shape.size() != 1 || info.shape[0] != size) {
            return shape_error(info, shape_text({size}));
        }
        return WeightVector{*info.dtype, size, info.data};
    }

    // A linear layer or embedding `<path>.weight` of logical shape [rows, cols].
    Result<WeightMatrix> matrix(const std::string& path, std::int64_t rows, std::int64_t cols) {
        const std::string weight_name = path + ".weight";
        auto t = get(weight_name);
        if (!t) return t.error();
        const io::TensorInfo& w = **t;
        WeightMatrix m;
        m.rows = rows;
        m.cols = cols;
        m.data = w.data;
        const std::string rc = shape_text({rows, cols});
        if (!checkpoint_.contains(path + ".scales")) {
            if (!is_float_dtype(w)) {
                return make_error(errc::unsupported_dtype,
                                  where(weight_name) + " has dtype " + w.dtype_name +
                                      " (expected F32, F16, BF16, or U32 with " + path +
                                      ".scales for MLX quantization)");
            }
            if (w.shape.size() != 2 || w.shape[0] != rows || w.shape[1] != cols) {
                return shape_error(w, rc);
            }
            m.dtype = *w.dtype;
            return m;
        }
        // MLX affine quantization (formats.md §2.3).
        if (!config_.quantization) {
            return make_error(errc::bad_config, where(path + ".scales") +
                                                    " exists but config.json has no "
                                                    "\"quantization\" entry");
        }
        const auto params = config_.quant_params_for(path);
        if (!params) {
            return make_error(errc::bad_config,
                              where(path + ".scales") +
                                  " exists but config.json's \"quantization\" says \"" + path +
                                  "\": false (not quantized)");
        }
        if (w.dtype != DType::kU32) {
            return make_error(errc::unsupported_dtype, where(weight_name) + " has dtype " +
                                                           w.dtype_name +
                                                           " but a quantized weight must be U32");
        }
        if (cols % params->group_size != 0) {
            return make_error(errc::shape_mismatch, where(weight_name) + ": input size " +
                                                        std::to_string(cols) +
                                                        " is not a multiple of group_size " +
                                                        std::to_string(params->group_size));
        }
        const std::int64_t packed_cols = cols * params->bits / 32;
        const std::int64_t n_groups = cols / params->group_size;
        if (w.shape.size() != 2 || w.shape[0] != rows || w.shape[1] != packed_cols) {
            return shape_error(w, shape_text({rows, packed_cols}) + " (" + rc + " at " +
                                      std::to_string(params->bits) + " bits)");
        }
        auto scales = get(path + ".scales");
        if (!scales) return scales.error();
        auto biases = get(path + ".biases");
        if (!biases) return biases.error();
        for (const io::TensorInfo* s : {*scales, *biases}) {
            if (!is_float_dtype(*s)) {
                return make_error(errc::unsupported_dtype, where(s->name) + " has dtype " +
                                                               s->dtype_name +
                                                               " (expected F32, F16 or BF16)");
            }
            if (s->shape.size() != 2 || s->shape[0] != rows || s->shape[1] != n_groups) {
                return shape_error(*s, "[" + std::to_string(rows) + ", " +
                                           std::to_string(n_groups) + "] (group_size " +
                                           std::to_string(params->group_size) + ")");
            }
        }
        if ((*scales)->dtype != (*biases)->dtype) {
            return make_error(errc::unsupported_dtype,
                              where((*biases)->name) + " has dtype " + (*biases)->dtype_name +
                                  " but " + (*scales)->name + " has " + (*scales)->dtype_name);
        }
        m.dtype = DType::kU32;
        m.bits = params->bits;
        m.group_size = params->group_size;
        m.scale_dtype = *(*scales)->dtype;
        m.scales = (*scales)->data;
        m.biases = (*biases)->data;
        return m;
    }

private:
    io::Checkpoint& checkpoint_;
    const ModelConfig& config_;
    std::set<std::string> used_;
    std::uint64_t n_bytes_ = 0;
};

// Rows [first, first + n) of `m`: a view, as a row's codes (or values), scales and biases are
// each contiguous and the rows follow one another.
WeightMatrix row_slice(const WeightMatrix& m, std::int64_t first, std::int64_t n) {
    WeightMatrix s = m;
    s.rows = n;
    s.data = static_cast<const std::byte*>(m.data) + first * m.row_bytes();
    if (m.quantized()) {
        const std::int64_t scale_row_bytes =
            m.cols / m.group_size * static_cast<std::int64_t>(dtype_bits(m.scale_dtype) / 8);
        s.scales = static_cast<const std::byte*>(m.scales) + first * scale_row_bytes;
        s.biases = static_cast<const std::byte*>(m.biases) + first * scale_row_bytes;
    }
    return s;
}

Result<LayerWeights> load_layer(StageLoader& loader, const ModelConfig& c, int layer) {
    const std::string p = layer_prefix(layer);
    const std::int64_t hidden = c.hidden_size;
    const std::int64_t q_dim = c.q_dim();
    const std::int64_t kv_dim = c.kv_dim();
    const std::int64_t inter = c.intermediate_size;
    LayerWeights l;

#define BRIGADE_LOAD(dst, expr)     \
    do {                            \
        auto r_ = (expr);           \
        if (!r_) return r_.error(); \
        dst = *r_;                  \
    } while (0)

    BRIGADE_LOAD(l.attn_norm, loader.vector(p + "input_layernorm.weight", hidden));
    BRIGADE_LOAD(l.mlp_norm, loader.vector(p + "post_attention_layernorm.weight", hidden));
    if (c.fused_projections) {
        WeightMatrix qkv;
        BRIGADE_LOAD(qkv, loader.matrix(p + "self_attn.qkv_proj", q_dim + 2 * kv_dim, hidden));
        l.wq = row_slice(qkv, 0, q_dim);
        l.wk = row_slice(qkv, q_dim, kv_dim);
        l.wv = row_slice(qkv, q_dim + kv_dim, kv_dim);
    } else {
        BRIGADE_LOAD(l.wq, loader.matrix(p + "self_attn.q_proj", q_dim, hidden));
        BRIGADE_LOAD(l.wk, loader.matrix(p + "self_attn.k_proj", kv_dim, hidden));
        BRIGADE_LOAD(l.wv, loader.matrix(p + "self_attn.v_proj", kv_dim, hidden));
    }
    BRIGADE_LOAD(l.wo, loader.matrix(p + "self_attn.o_proj", hidden, q_dim));
    if (c.qkv_bias) {
        BRIGADE_LOAD(l.bq, loader.vector(p + "self_attn.q_proj.bias", q_dim));
        BRIGADE_LOAD(l.bk, loader.vector(p + "self_attn.k_proj.bias", kv_dim));
        BRIGADE_LOAD(l.bv, loader.vector(p + "self_attn.v_proj.bias", kv_dim));
    }
    if (c.o_bias) BRIGADE_LOAD(l.bo, loader.vector(p + "self_attn.o_proj.bias", hidden));
    if (c.qk_norm) {
        BRIGADE_LOAD(l.q_norm, loader.vector(p + "self_attn.q_norm.weight", c.head_dim));
        BRIGADE_LOAD(l.k_norm, loader.vector(p + "self_attn.k_norm.weight", c.head_dim));
    }
    if (c.fused_projections) {
        WeightMatrix gate_up;
        BRIGADE_LOAD(gate_up, loader.matrix(p + "mlp.gate_up_proj", 2 * inter, hidden));
        l.w_gate = row_slice(gate_up, 0, inter);
        l.w_up = row_slice(gate_up, inter, inter);
    } else {
        BRIGADE_LOAD(l.w_gate, loader.matrix(p + "mlp.gate_proj", inter, hidden));
        BRIGADE_LOAD(l.w_up, loader.matrix(p + "mlp.up_proj", inter, hidden));
    }
    BRIGADE_LOAD(l.w_down, loader.matrix(p + "mlp.down_proj", hidden, inter));
    if (c.mlp_bias) {
        BRIGADE_LOAD(l.b_gate, loader.vector(p + "mlp.gate_proj.bias", inter));
        BRIGADE_LOAD(l.b_up, loader.vector(p + "mlp.up_proj.bias", inter));
        BRIGADE_LOAD(l.b_down, loader.vector(p + "mlp.down_proj.bias", hidden));
    }
#undef BRIGADE_LOAD
    return l;
}

}  // namespace

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

Result<StageWeights> load_stage_weights(io::Checkpoint& checkpoint, const ModelConfig& config,
                                        LayerRange range) {
    if (range.first < 0 || range.last > config.n_layers || range.first > range.last) {
        return make_error(errc::out_of_range, "layer range [" + std::to_string(range.first) + ", " +
                                                  std::to_string(range.last) +
                                                  ") is not within the model's " +
                                                  std::to_string(config.n_layers) + " layers");
    }
    if (range.empty() && range.first != 0 && range.last != config.n_layers) {
        return make_error(errc::out_of_range, "an empty layer range must be the head or tail");
    }
    StageLoader loader(checkpoint, config);
    StageWeights s;
    s.range = range;
    s.is_head = range.first == 0;
    s.is_tail = range.last == config.n_layers;
    const std::int64_t vocab = config.vocab_size;
    const std::int64_t hidden = config.hidden_size;
    if (s.is_head || (s.is_tail && config.tie_word_embeddings)) {
        auto e = loader.matrix("model.embed_tokens", vocab, hidden);
        if (!e) return e.error();
        s.embed = *e;
    }
    for (int i = range.first; i < range.last; ++i) {
        auto l = load_layer(loader, config, i);
        if (!l) return l.error();
        s.layers.push_back(*l);
    }
    if (s.is_tail) {
        auto n = loader.vector("model.norm.weight", hidden);
        if (!n) return n.error();
        s.final_norm = *n;
        if (config.tie_word_embeddings) {
            s.lm_head = s.embed;
        } else {
            auto h = loader.matrix("lm_head", vocab, hidden);
            if (!h) return h.error();
            s.lm_head = *h;
        }
    }
    if (!s.is_head) s.embed = WeightMatrix{};
    s.n_bytes = loader.n_bytes();
    return s;
}

Result<ModelShape> compute_model_shape(io::Checkpoint& checkpoint, const ModelConfig& config,
                                       DType kv_dtype) {
    ModelShape shape;
    shape.n_layers = config.n_layers;
    shape.hidden_size = config.hidden_size;
    shape.vocab_size = config.vocab_size;
    shape.layer_bytes.assign(static_cast<std::size_t>(config.n_layers), 0);
    shape.kv_bytes_per_token_per_layer =
        2ull * static_cast<std::uint64_t>(config.kv_dim()) * kv_element_bytes(kv_dtype);
    for (const auto& name : checkpoint.tensor_names()) {
        auto t = checkpoint.tensor(name);
        if (!t) return t.error();
        const std::uint64_t bytes = (*t)->n_bytes();
        if (name.rfind("model.layers.", 0) == 0) {
            const auto rest = name.substr(13);
            const auto dot = rest.find('.');
            int layer = -1;
            const auto digits = rest.substr(0, dot);
            auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
            if (ec != std::errc{} || end != digits.data() + digits.size()) layer = -1;
            if (layer >= 0 && layer < config.n_layers) {
                shape.layer_bytes[static_cast<std::size_t>(layer)] += bytes;
            }
        } else if (name.rfind("model.embed_tokens.", 0) == 0) {
            shape.embedding_bytes += bytes;
        } else if (name.rfind("lm_head.", 0) == 0 || name == "model.norm.weight") {
            shape.lm_head_bytes += bytes;
        }
    }
    return shape;
}

}  // namespace brigade::model
