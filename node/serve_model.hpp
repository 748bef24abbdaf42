#pragma once
// What `brigade serve` holds for the one model it serves at the pipeline head: the loaded stage
// (all layers on this node for now), the tokenizer and chat template, and the names it answers
// to. Built by cmd_serve.cpp, read by the completion service and its compute thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/completion_service.hpp"
#include "model/backend.hpp"
#include "model/forward.hpp"
#include "model/sampling.hpp"
#include "model/text/chat_template.hpp"
#include "model/text/tokenizer.hpp"

namespace brigade::node {

struct ServeModel {
    explicit ServeModel(model::text::Tokenizer t) : tokenizer(std::move(t)) {}

    api::ModelInfo info;       // id = directory name; aliases = path, the given ref, --alias
    std::int64_t context = 0;  // positions per sequence
    std::unique_ptr<model::Backend> backend;
    std::unique_ptr<model::Stage> stage;  // layers [0, n_layers): head and tail
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
