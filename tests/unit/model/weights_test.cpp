// Stage weight loading: only the tensors of the range are touched; bad checkpoints give one
// error naming the file and tensor.
#include "model/weights.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "model/backend.hpp"
#include "model/forward.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/model/tiny_model.hpp"

namespace brigade::model {
namespace {

std::unique_ptr<Backend> reference() { return make_backend(BackendKind::kReference).value(); }

Result<std::unique_ptr<Stage>> load(const test::TempDir& dir, LayerRange range, Backend& b) {
    return Stage::load(dir.path(), range, b);
}

TEST(StageWeights, HeadMiddleTailLoadOnlyTheirTensors) {
    test::TempDir dir;
    test::TinyModelSpec spec;
    spec.layers = 4;
    spec.sharded = true;
    test::write_tiny_model(dir.path(), spec);
    auto cfg = load_model_config(dir.path()).value();
    auto ckpt = io::Checkpoint::open(dir.path()).value();

    auto mid = load_stage_weights(ckpt, cfg, {1, 3});
    ASSERT_TRUE(mid) << mid.error().message;
    EXPECT_FALSE(mid->is_head);
    EXPECT_FALSE(mid->is_tail);
    EXPECT_FALSE(mid->embed.valid());
    EXPECT_FALSE(mid->lm_head.valid());
    EXPECT_EQ(mid->layers.size(), 2u);

    auto head = load_stage_weights(ckpt, cfg, {0, 1});
    ASSERT_TRUE(head);
    EXPECT_TRUE(head->embed.valid());
    EXPECT_FALSE(head->lm_head.valid());
    auto tail = load_stage_weights(ckpt, cfg, {3, 4});
    ASSERT_TRUE(tail);
    EXPECT_FALSE(tail->embed.valid());
    EXPECT_TRUE(tail->lm_head.valid());
    EXPECT_GT(head->n_bytes, 0u);

    auto shape = compute_model_shape(ckpt, cfg);
    ASSERT_TRUE(shape);
    EXPECT_EQ(shape->layer_bytes.size(), 4u);
    EXPECT_EQ(shape->layer_bytes[0], shape->layer_bytes[3]);
    EXPECT_GT(shape->embedding_bytes, 0u);
    EXPECT_GT(shape->lm_head_bytes, 0u);

    auto bad = load_stage_weights(ckpt, cfg, {2, 5});
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, errc::out_of_range);
}

// Every tensor outside a stage's range is NaN garbage, yet the stage computes exactly what the
// same stage of the clean checkpoint computes.
TEST(StageWeights, GarbageOutsideTheRangeIsNeverRead) {
    test::TinyModelSpec spec;
    spec.layers = 4;
    test::TempDir clean_dir;
    test::write_tiny_model(clean_dir.path(), spec);
    auto backend = reference();

    auto all = io::Checkpoint::open(clean_dir.path()).value().tensor_names();
    const LayerRange range{1, 3};
    test::TinyModelSpec poisoned = spec;
    for (const auto& name : all) {
        const bool in_range =
            name.rfind("model.layers.1.", 0) == 0 || name.rfind("model.layers.2.", 0) == 0;
        if (!in_range) poisoned.garbage.insert(name);
    }
    test::TempDir poisoned_dir;
    test::write_tiny_model(poisoned_dir.path(), poisoned);

    // The full clean model gives the hidden state entering layer 1.
    auto head = load(clean_dir, {0, 1}, *backend).value();
    SequenceBatchEntry e{7, {3, 14, 15, 92, 6}, 0, 5};
    auto h1 = head->run_layers({e}).value().hidden;
    auto clean_mid = load(clean_dir, range, *backend).value();
    auto poisoned_mid = load(poisoned_dir, range, *backend);
    ASSERT_TRUE(poisoned_mid) << poisoned_mid.error().message;
    auto want = clean_mid->run_layers({e}, h1).value().hidden;
    auto got = (*poisoned_mid)->run_layers({e}, h1).value().hidden;
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(want, got);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));

    // The poisoned tail and head, by contrast, produce NaN: the garbage is real.
    auto poisoned_full = load(poisoned_dir, {0, 4}, *backend).value();
    auto logits = poisoned_full->run_layers({e}).value().logits;
    bool any_nan = false;
    for (float v : logits) any_nan = any_nan || std::isnan(v);
    EXPECT_TRUE(any_nan);
}

void expect_load_error(const test::TinyModelSpec& spec,
                       const std::function<void(const std::filesystem::path&)>& damage, errc code,
                       const std::string& needle, LayerRange range = {0, 2}) {
    test::TempDir dir;
    test::write_tiny_model(dir.path(), spec);
    damage(dir.path());
    auto backend = reference();
    auto s = Stage::load(dir.path(), range, *backend);
    ASSERT_FALSE(s) << "expected an error mentioning " << needle;
    EXPECT_EQ(s.error().code, code) << s.error().message;
    EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
}

test::TinyModelSpec two_layers() {
    test::TinyModelSpec s;
    s.layers = 2;
    return s;
}

// Rewrites model.safetensors with one tensor changed.
void rewrite_tensor(const std::filesystem::path& dir, const std::string& name,
                    const std::function<void(io::TensorToWrite&)>& change, bool drop = false) {
    auto f = io::SafetensorsFile::open(dir / "model.safetensors").value();
    std::vector<io::TensorToWrite> out;
    for (const auto& [n, t] : f.tensors()) {
        io::TensorToWrite w{n, t.dtype_name, t.shape,
                            std::string(reinterpret_cast<const char*>(t.data), t.n_bytes())};
        if (n == name) {
            if (drop) continue;
            change(w);
        }
        out.push_back(std::move(w));
    }
    ASSERT_TRUE(io::write_safetensors(dir / "model.safetensors.tmp", out));
    std::filesystem::rename(dir / "model.safetensors.tmp", dir / "model.safetensors");
}

TEST(StageWeightsBadInput, MissingTensor) {
    expect_load_error(
        two_layers(),
        [](const auto& d) { rewrite_tensor(d, "model.layers.1.mlp.up_proj.weight", {}, true); },
        errc::missing_tensor, "model.layers.1.mlp.up_proj.weight");
}

TEST(StageWeightsBadInput, ShapeMismatch) {
    expect_load_error(
        two_layers(),
        [](const auto& d) {
            rewrite_tensor(d, "model.layers.0.self_attn.k_proj.weight", [](io::TensorToWrite& t) {
                t.shape = {t.shape[1], t.shape[0]};
            });
        },
        errc::shape_mismatch,
        "\"model.layers.0.self_attn.k_proj.weight\" has shape [64, 32], expected [32, 64]");
}

TEST(StageWeightsBadInput, UnsupportedDtype) {
    expect_load_error(
        two_layers(),
        [](const auto& d) {
            rewrite_tensor(d, "model.norm.weight", [](io::TensorToWrite& t) { t.dtype = "I32"; });
        },
        errc::unsupported_dtype, "model.norm.weight");
}

TEST(StageWeightsBadInput, QuantizedShapesAreChecked) {
    auto spec = two_layers();
    spec.bits = 4;
    expect_load_error(
        spec,
        [](const auto& d) {
            rewrite_tensor(d, "model.layers.1.mlp.down_proj.scales", [](io::TensorToWrite& t) {
                t.shape = {t.shape[0] * 2, t.shape[1] / 2};
            });
        },
        errc::shape_mismatch, "model.layers.1.mlp.down_proj.scales");
    // The config says 8 bits but the weights were packed at 4.
    auto lying = spec;
    lying.extra_config = {{"quantization", {{"bits", 8}}}};
    expect_load_error(
        lying, [](const auto&) {}, errc::shape_mismatch,
        "\"model.embed_tokens.weight\" has shape [96, 8], expected [96, 16] ([96, 64] at 8 bits)");
    // .scales present but no quantization in config.json.
    auto no_cfg = spec;
    no_cfg.extra_config = {{"quantization", nullptr}, {"quantization_config", nullptr}};
    expect_load_error(
        no_cfg, [](const auto&) {}, errc::bad_config, ".scales");
}

TEST(StageWeightsBadInput, UnsupportedArchitectureAndBadRope) {
    auto spec = two_layers();
    spec.extra_config = {{"model_type", "gemma2"}};
    expect_load_error(
        spec, [](const auto&) {}, errc::unsupported_architecture, "gemma2");
    // A Llama checkpoint labelled phi3: the fused weight Phi-3 needs is named as missing.
    spec.extra_config = {{"model_type", "phi3"}};
    auto labelled = spec;
    test::TempDir dir;
    test::write_tiny_model(dir.path(), labelled);
    auto backend = reference();
    auto s = Stage::load(dir.path(), {0, 2}, *backend);
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().message.find("self_attn.qkv_proj.weight"), std::string::npos)
        << s.error().message;
    spec.extra_config = {{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}}}};
    expect_load_error(
        spec, [](const auto&) {}, errc::unsupported_architecture, "longrope");
    spec.extra_config = {{"num_hidden_layers", nullptr}};
    expect_load_error(
        spec, [](const auto&) {}, errc::bad_config, "num_hidden_layers");
}

TEST(StageWeightsBadInput, TruncatedWeightsFile) {
    expect_load_error(
        two_layers(),
        [](const auto& d) {
            std::filesystem::resize_file(d / "model.safetensors",
                                         std::filesystem::file_size(d / "model.safetensors") - 3);
        },
        errc::bad_format, "model.safetensors");
}

}  // namespace
}  // namespace brigade::model
