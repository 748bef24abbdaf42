#pragma once
// Loads the model `brigade serve` serves: resolves --model, reads the weights with a progress
// bar on a terminal (plain log lines otherwise), builds the stage with every layer, the
// tokenizer and the chat template.

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct ServeModelOptions {
    std::string model_ref;             // --model; empty = the bundled demo
    std::vector<std::string> aliases;  // --alias
    std::int64_t context = 0;          // --ctx; 0 = the model's max_position_embeddings
    int n_threads = 0;                 // --threads; 0 = all cores
    std::string backend = "cpu";       // cpu | reference
};

model::Result<ServeModel> load_serve_model(const ServeModelOptions& options,
                                           spdlog::logger& logger);

}  // namespace brigade::node
