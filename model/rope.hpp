#pragma once
// RoPE inverse frequencies as Hugging Face computes them (transformers
// `modeling_rope_utils.py`, formats.md §3.3): default, `linear` and `llama3` scaling. The
// rotation itself is a backend op (`Backend::rope`, half-split pairs i and i + d/2).

#include <vector>

#include "model/model_config.hpp"

namespace brigade::model {

struct RopeTable {
    std::vector<float> inv_freq;     // [rot_dims / 2]
    float attention_scaling = 1.0f;  // multiplies cos and sin; 1 for the supported types
};

// inv_freq_i = theta^(-2i/d) for i < d/2 (d = rot_dims), then scaled per `scaling`:
// linear divides by factor; llama3 divides the low-frequency band by factor, keeps the
// high-frequency band, and interpolates smoothly in between. Computed in double precision,
// then rounded to f32 (HF computes in f32 on CPU from int64 arange; the difference is within
// one f32 ulp of the result).
RopeTable make_rope_table(double theta, int rot_dims, const RopeScaling& scaling);

}  // namespace brigade::model
