#include "tests/support/random_model.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/io/safetensors_writer.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

using model::io::TensorToWrite;

class TensorMaker {
public:
    explicit TensorMaker(std::uint32_t seed) : rng_(seed) {}

    // Uniform in [-scale, scale].
    TensorToWrite random(std::string name, std::vector<std::int64_t> shape, float scale) {
        std::uniform_real_distribution<float> dist(-scale, scale);
        return make(std::move(name), std::move(shape), [&] { return dist(rng_); });
    }
    TensorToWrite ones(std::string name, std::int64_t n) {
        return make(std::move(name), {n}, [] { return 1.0f; });
    }

private:
    template <typename Gen>
    TensorToWrite make(std::string name, std::vector<std::int64_t> shape, Gen gen) {
        std::int64_t n = 1;
        for (auto d : shape) n *= d;
        std::vector<float> values(static_cast<std::size_t>(n));
        for (auto& v : values) v = gen();
        TensorToWrite t{std::move(name), "BF16", std::move(shape), {}};
        model::io::append_float_bytes(t.bytes, "BF16", values.data(), values.size());
        return t;
    }
    std::mt19937 rng_;
};

}  // namespace

model::Result<void> write_random_qwen2_model(const std::filesystem::path& dir,
                                             const RandomModelShape& s) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return model::make_error(model::errc::io_error, dir.string() + ": " + ec.message());
    const nlohmann::json config = {{"architectures", {"Qwen2ForCausalLM"}},
                                   {"model_type", "qwen2"},
                                   {"hidden_size", s.hidden},
                                   {"num_hidden_layers", s.layers},
                                   {"num_attention_heads", s.heads},
                                   {"num_key_value_heads", s.kv_heads},
                                   {"head_dim", s.head_dim},
                                   {"intermediate_size", s.intermediate},
                                   {"vocab_size", s.vocab},
                                   {"hidden_act", "silu"},
                                   {"rms_norm_eps", 1e-6},
                                   {"rope_theta", 1000000.0},
                                   {"max_position_embeddings", s.max_position},
                                   {"tie_word_embeddings", true},
                                   {"bos_token_id", 0},
                                   {"eos_token_id", 1},
                                   {"torch_dtype", "bfloat16"}};
    std::ofstream(dir / "config.json") << config.dump(2);

    TensorMaker make(s.seed);
    const std::int64_t hidden = s.hidden;
    const std::int64_t q = static_cast<std::int64_t>(s.heads) * s.head_dim;
    const std::int64_t kv = static_cast<std::int64_t>(s.kv_heads) * s.head_dim;
    const std::int64_t inter = s.intermediate;
    // Linear weights ~ U(+-sqrt(3 / fan_in)) keep activations near unit scale through the
    // layers; large embeddings make the (tied) logits peaked, so greedy choices have margins.
    auto lin = [](std::int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
    std::vector<TensorToWrite> tensors;
    tensors.push_back(make.random("model.embed_tokens.weight", {s.vocab, hidden}, 0.5f));
    for (int l = 0; l < s.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        tensors.push_back(make.ones(p + "input_layernorm.weight", hidden));
        tensors.push_back(make.ones(p + "post_attention_layernorm.weight", hidden));
        tensors.push_back(make.random(p + "self_attn.q_proj.weight", {q, hidden}, lin(hidden)));
        tensors.push_back(make.random(p + "self_attn.q_proj.bias", {q}, 0.1f));
        tensors.push_back(make.random(p + "self_attn.k_proj.weight", {kv, hidden}, lin(hidden)));
        tensors.push_back(make.random(p + "self_attn.k_proj.bias", {kv}, 0.1f));
        tensors.push_back(make.random(p + "self_attn.v_proj.weight", {kv, hidden}, lin(hidden)));
        tensors.push_back(make.random(p + "self_attn.v_proj.bias", {kv}, 0.1f));
        tensors.push_back(make.random(p + "self_attn.o_proj.weight", {hidden, q}, lin(q)));
        tensors.push_back(make.random(p + "mlp.gate_proj.weight", {inter, hidden}, lin(hidden)));
        tensors.push_back(make.random(p + "mlp.up_proj.weight", {inter, hidden}, lin(hidden)));
        tensors.push_back(make.random(p + "mlp.down_proj.weight", {hidden, inter}, lin(inter)));
    }
    tensors.push_back(make.ones("model.norm.weight", hidden));
    if (auto w = model::io::write_safetensors(dir / "model.safetensors", tensors); !w) return w;

    const auto demo = source_dir() / "model" / "demo";
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
        std::filesystem::copy_file(demo / name, dir / name,
                                   std::filesystem::copy_options::overwrite_existing, ec);
        if (ec) {
            return model::make_error(model::errc::io_error,
                                     "copy " + (demo / name).string() + ": " + ec.message());
        }
    }
    return {};
}

}  // namespace brigade::test
