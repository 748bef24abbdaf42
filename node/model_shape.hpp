#pragma once
// What the planner needs to know about a model directory, read from config.json and the
// safetensors headers only (no weights are loaded), plus a quick measurement of this machine's
// decode speed for `brigade plan`.

#include <filesystem>

#include "model/errors.hpp"
#include "model/types.hpp"

namespace brigade::node {

struct ModelShapeInfo {
    model::ModelShape shape;  // per-layer bytes incl. quantized scales/biases, embedding, lm_head
    bool tied_embeddings = false;
    int max_position_embeddings = 0;
};

// Byte sizes from the headers; KV per token per layer = 2 * n_kv_heads * head_dim * 4 (f32 cache).
// `kv_dtype`: the KV cache's element type this node's stages use (--kv-f32), for the KV bytes.
model::Result<ModelShapeInfo> read_model_shape(const std::filesystem::path& model_dir,
                                               model::DType kv_dtype = model::DType::kF16);

// Seconds per layer for one decode token on this machine with the cpu backend: loads every
// layer, runs a short prompt, then times `n_steps` single-token decode steps and divides by the
// number of layers (the lm_head is included, so this slightly overstates a layer's cost).
model::Result<double> measure_seconds_per_layer(const std::filesystem::path& model_dir,
                                                int n_steps = 4);

}  // namespace brigade::node
