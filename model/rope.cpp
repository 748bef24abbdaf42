#include "model/rope.hpp"

#include <cmath>
#include <numbers>

namespace brigade::model {

RopeTable make_rope_table(double theta, int rot_dims, const RopeScaling& scaling) {
    RopeTable table;
    const int n_freq = rot_dims / 2;
    table.inv_freq.resize(static_cast<std::size_t>(n_freq));
    for (int i = 0; i < n_freq; ++i) {
        // HF: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)) — the exponent is an f32.
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dims);
        double inv = 1.0 / std::pow(theta, static_cast<double>(exponent));
        switch (scaling.kind) {
            case RopeScaling::Kind::kNone:
                break;
            case RopeScaling::Kind::kLinear:
                inv /= scaling.factor;
                break;
            case RopeScaling::Kind::kLlama3: {
                const double old_ctx = scaling.original_max_position_embeddings;
                const double low_wavelen = old_ctx / scaling.low_freq_factor;
                const double high_wavelen = old_ctx / scaling.high_freq_factor;
                const double wavelen = 2.0 * std::numbers::pi / inv;
                if (wavelen > low_wavelen) {
                    inv /= scaling.factor;
                } else if (wavelen >= high_wavelen) {
                    // HF treats both band edges as "medium" (inclusive comparisons).
                    const double smooth = (old_ctx / wavelen - scaling.low_freq_factor) /
                                          (scaling.high_freq_factor - scaling.low_freq_factor);
                    inv = (1.0 - smooth) * inv / scaling.factor + smooth * inv;
                }
                break;
            }
        }
        table.inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(inv);
    }
    return table;
}

}  // namespace brigade::model
