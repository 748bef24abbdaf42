#pragma once
// Loads the model a node serves, in two parts (serve_model.hpp):
//  - `load_model_frontend`: resolves --model, reads config, tokenizer, chat template (no weights);
//  - `load_stage_resources`: one layer range on a backend, reading its weight files first with a
//    progress bar on a terminal (plain log lines otherwise).

#include <spdlog/logger.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "model/types.hpp"
#include "node/pipeline_types.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct ServeModelOptions {
    std::string model_ref;             // --model; empty = the bundled demo
    std::vector<std::string> aliases;  // --alias
    std::int64_t context = 0;          // --ctx; 0 = the model's max_position_embeddings
    int n_threads = 0;                 // --threads; 0 = all cores
    bool int8_activations = false;     // --int8-activations (BackendOptions)
    bool int16_activations = false;    // --int16-activations (BackendOptions)
    bool f32_activations = false;      // --f32-activations (BackendOptions)
    bool no_amx = false;               // --no-amx (BackendOptions::cpu_amx)
    bool kv_f32 = false;               // --kv-f32 (StageOptions::kv_dtype)
    std::string backend = "cpu";       // cpu | reference
};

struct StageLoadOptions {
    std::string backend = "cpu";                 // cpu | reference
    int n_threads = 0;                           // 0 = all cores
    bool int8_activations = false;               // BackendOptions::cpu_int8_activations
    bool int16_activations = false;              // BackendOptions::cpu_int16_activations
    bool f32_activations = false;                // not BackendOptions::cpu_split_int8_activations
    bool amx = true;                             // BackendOptions::cpu_amx
    model::DType kv_dtype = model::DType::kF16;  // StageOptions::kv_dtype
    // Memory offered for the stage's weights and KV (serve --memory). A stage of the whole model
    // bounds its KV cache by what the weights leave, so long requests wait or fail instead of
    // exhausting the machine; a split is bounded by its head (load_stage_resources says why).
    // 0 = no limit.
    std::uint64_t memory_bytes = 0;
    bool show_progress = true;  // read the range's weight files first, with a bar on a tty
};

// The KV cache budget of a stage offered `memory_bytes` for weights and KV whose weights take
// `weight_bytes`: what is left, at least 1 byte (no KV fits then); 0 (no limit) when nothing
// was offered.
std::uint64_t kv_budget_bytes(std::uint64_t memory_bytes, std::uint64_t weight_bytes);

// The weight files a stage of `range` reads: with a shard index, only the shards holding the
// range's layers (plus embedding / norm / lm_head for the head and the tail); else every
// *.safetensors file. Sorted.
std::vector<std::filesystem::path> weight_files_for_range(const std::filesystem::path& dir,
                                                          model::LayerRange range, int n_layers);

// Everything but the weights. Reads only small files (config, tokenizer, template).
model::Result<ModelFrontend> load_model_frontend(const ServeModelOptions& options,
                                                 spdlog::logger& logger);

// Layers `range` of the frontend's model with their KV cache (context = frontend.context).
model::Result<std::shared_ptr<StageResources>> load_stage_resources(const ModelFrontend& model,
                                                                    model::LayerRange range,
                                                                    const StageLoadOptions& options,
                                                                    spdlog::logger& logger);

}  // namespace brigade::node
