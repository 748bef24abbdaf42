#include "node/model_shape.hpp"

#include <chrono>
#include <vector>

#include "model/backend.hpp"
#include "model/forward.hpp"
#include "model/io/safetensors.hpp"
#include "model/model_config.hpp"
#include "model/weights.hpp"

namespace brigade::node {

model::Result<ModelShapeInfo> read_model_shape(const std::filesystem::path& model_dir,
                                               model::DType kv_dtype) {
    auto config = model::load_model_config(model_dir);
    if (!config) return config.error();
    auto valid = model::validate_model_config(*config, (model_dir / "config.json").string());
    if (!valid) return valid.error();
    auto checkpoint = model::io::Checkpoint::open(model_dir);
    if (!checkpoint) return checkpoint.error();
    auto shape = model::compute_model_shape(*checkpoint, *config, kv_dtype);
    if (!shape) return shape.error();
    ModelShapeInfo info;
    info.shape = std::move(*shape);
    info.tied_embeddings = config->tie_word_embeddings;
    info.max_position_embeddings = config->max_position_embeddings;
    return info;
}

model::Result<double> measure_seconds_per_layer(const std::filesystem::path& model_dir,
                                                int n_steps) {
    auto backend = model::make_backend(model::BackendKind::kCpu);
    if (!backend) return backend.error();
    auto config = model::load_model_config(model_dir);
    if (!config) return config.error();
    const model::LayerRange all{0, config->n_layers};
    model::StageOptions options;
    options.max_context = 64;
    auto stage = model::Stage::load(model_dir, all, **backend, options);
    if (!stage) return stage.error();

    // A short prompt first, so decode steps attend over a few cached positions like real ones.
    model::SequenceBatchEntry entry;
    entry.seq_id = 1;
    entry.tokens = {1, 2, 3, 4};
    entry.n_tokens = 4;
    auto warm = (*stage)->run_layers({entry});
    if (!warm) return warm.error();
    std::int32_t pos = 4;

    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n_steps; ++i) {
        model::SequenceBatchEntry step;
        step.seq_id = 1;
        step.tokens = {static_cast<std::int32_t>(5 + i)};
        step.pos0 = pos;
        step.n_tokens = 1;
        auto out = (*stage)->run_layers({step});
        if (!out) return out.error();
        ++pos;
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return elapsed.count() / n_steps / config->n_layers;
}

}  // namespace brigade::node
