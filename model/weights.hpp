#pragma once
// The weights one pipeline stage needs, as views into a memory-mapped checkpoint
// (house guide §2). Loading a stage for `LayerRange [first, last)` looks up only:
//   - `model.embed_tokens.*` when first == 0 (the head embeds token ids),
//   - `model.layers.{i}.*` for i in the range,
//   - `model.norm.weight` and `lm_head.*` when last == n_layers (the tail); a tied model's
//     tail uses `model.embed_tokens.*` as its lm_head instead.
// Every other tensor is never opened, validated or read, so its bytes may be anything.
//
// A module is MLX-quantized iff `<path>.scales` exists (formats.md §2.1); its bits and group
// size come from config.json's `"quantization"` (per-module overrides first).

#include <cstdint>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "model/io/safetensors.hpp"
#include "model/model_config.hpp"
#include "model/tensor.hpp"
#include "model/types.hpp"

namespace brigade::model {

struct LayerWeights {
    WeightVector attn_norm;  // input_layernorm [hidden]
    WeightMatrix wq, wk, wv, wo;
    WeightVector bq, bk, bv, bo;  // invalid (null) when the family has no such bias
    WeightVector q_norm, k_norm;  // qwen3 [head_dim]
    WeightVector mlp_norm;        // post_attention_layernorm [hidden]
    WeightMatrix w_gate, w_up, w_down;
    WeightVector b_gate, b_up, b_down;
};

struct StageWeights {
    LayerRange range;
    bool is_head = false;  // range.first == 0: `embed` is set
    bool is_tail = false;  // range.last == n_layers: `final_norm` and `lm_head` are set
    WeightMatrix embed;    // [vocab, hidden]
    WeightVector final_norm;
    WeightMatrix lm_head;              // [vocab, hidden]; the embedding table when tied
    std::vector<LayerWeights> layers;  // [range.size()], layers[i] is layer range.first + i
    std::uint64_t n_bytes = 0;         // bytes of all distinct tensors referenced
};

// Looks up and validates (names, dtypes, shapes) every tensor of the range. Errors name the
// file and the tensor. The checkpoint must outlive the returned views.
Result<StageWeights> load_stage_weights(io::Checkpoint& checkpoint, const ModelConfig& config,
                                        LayerRange range);

// Byte sizes per part of the model for planners, from safetensors headers only (no data read).
// `kv_dtype`: the KV cache's element type (StageOptions::kv_dtype), for the KV bytes.
Result<ModelShape> compute_model_shape(io::Checkpoint& checkpoint, const ModelConfig& config,
                                       DType kv_dtype = DType::kF16);

// "model.layers.{i}." — the prefix of every tensor of decoder layer i.
std::string layer_prefix(int layer);

}  // namespace brigade::model
