#pragma once
// Small random checkpoints for multi-process tests: Qwen2.5-shaped (qwen2 architecture: q/k/v
// biases, tied embeddings, rope theta 1e6, grouped-query attention) with the bundled demo
// model's tokenizer and chat template, so that `brigade run` and `brigade serve` take text.
// Deterministic for a given seed.

#include <cstdint>
#include <filesystem>

#include "model/errors.hpp"

namespace brigade::test {

struct RandomModelShape {
    int hidden = 128;
    int layers = 6;
    int heads = 4;
    int kv_heads = 2;
    int head_dim = 32;
    int intermediate = 352;
    int vocab = 4096;  // the demo tokenizer's vocabulary
    int max_position = 512;
    std::uint32_t seed = 7;
};

// Writes config.json, model.safetensors (BF16), generation_config.json and the demo model's
// tokenizer files into `dir` (created).
model::Result<void> write_random_qwen2_model(const std::filesystem::path& dir,
                                             const RandomModelShape& shape = {});

}  // namespace brigade::test
