#pragma once
// What a serving node holds for the one model of its mesh.
//  - `ModelFrontend`: what every node needs to take requests — the tokenizer, the chat template,
//    stop ids, names and context — and no weights (a node that is not in the plan still serves
//    the API and routes to the head).
//  - `StageResources` (pipeline_types.hpp): one loaded layer range and its backend, built by
//    `load_stage_resources` when a plan gives this node layers.
// Built by model_loading.cpp; read by the pipeline (head, stages, origin) on many threads, never
// written after loading.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/completion_service.hpp"
#include "model/backend.hpp"
#include "model/forward.hpp"
#include "model/model_config.hpp"
#include "model/sampling.hpp"
#include "model/text/chat_template.hpp"
#include "model/text/tokenizer.hpp"

namespace brigade::node {

struct ModelFrontend {
    explicit ModelFrontend(model::text::Tokenizer t) : tokenizer(std::move(t)) {}

    std::filesystem::path dir;  // the resolved model directory
    model::ModelConfig config;
    api::ModelInfo info;       // id = directory name; aliases = path, the given ref, --alias
    std::int64_t context = 0;  // positions per sequence (--ctx, else max_position_embeddings)
    model::text::Tokenizer tokenizer;
    std::optional<model::text::ChatTemplate> chat_template;  // absent: chat requests get 400
    std::vector<std::int32_t> stop_ids;  // EOS of config + generation_config + end of turn
    std::int32_t vocab_size = 0;         // rows of the logits
};

// Server-wide sampling defaults for what a request leaves unset (`--temp`, `--top-p`, ...).
struct SamplingDefaults {
    double temperature = 0.7;
    double top_p = 1.0;
    int top_k = 0;
    double min_p = 0.0;
    double repetition_penalty = 1.0;
};

}  // namespace brigade::node
