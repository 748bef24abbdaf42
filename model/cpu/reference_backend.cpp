#include "model/cpu/reference_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/cpu/weight_decode.hpp"

namespace brigade::model::cpu {
namespace {

class ReferenceBackend final : public Backend {
public:
    std::string_view name() const override { return "reference"; }
    BackendKind kind() const override { return BackendKind::kReference; }
    bool supports(const WeightMatrix& w) const override { return weight_format_supported(w); }

    DeviceBuffer alloc(std::size_t bytes) override { return alloc_host_buffer(bytes); }
    WeightMatrix upload(const WeightMatrix& host) override { return host; }
    WeightVector upload(const WeightVector& host) override { return host; }
    void write(DeviceBuffer& dst, std::size_t offset_bytes, const void* src,
               std::size_t bytes) override {
        std::memcpy(static_cast<std::uint8_t*>(dst.data()) + offset_bytes, src, bytes);
    }
    void read(const DeviceBuffer& src, std::size_t offset_bytes, void* dst,
              std::size_t bytes) override {
        std::memcpy(dst, static_cast<const std::uint8_t*>(src.data()) + offset_bytes, bytes);
    }

    void store_as(const float* src, std::int64_t n, DType dtype, DeviceBuffer& dst,
                  std::size_t offset_bytes) override {
        auto* out = static_cast<std::uint8_t*>(dst.data()) + offset_bytes;
        if (dtype != DType::kF16) {
            std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(float));
            return;
        }
        for (std::int64_t i = 0; i < n; ++i) {
            const std::uint16_t h = f32_to_f16_saturated(src[i]);
            std::memcpy(out + 2 * i, &h, sizeof h);
        }
    }
    void store_key_tiles(const float* src, std::int64_t n_rows, std::int64_t row_len,
                         std::int64_t pos0, DType dtype, DeviceBuffer& dst,
                         std::size_t offset_bytes) override {
        auto* out = static_cast<std::uint8_t*>(dst.data()) + offset_bytes;
        for (std::int64_t i = 0; i < n_rows; ++i) {
            for (std::int64_t e = 0; e < row_len; ++e) {
                const float x = src[i * row_len + e];
                const std::int64_t at = key_element_index(KeyLayout::kTiles, pos0 + i, e, row_len);
                if (dtype == DType::kF16) {
                    const std::uint16_t h = f32_to_f16_saturated(x);
                    std::memcpy(out + 2 * at, &h, sizeof h);
                } else {
                    std::memcpy(out + 4 * at, &x, sizeof x);
                }
            }
        }
    }
    void synchronize() override {}

    void matmul(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                const WeightVector* bias) override {
        std::vector<float> row(static_cast<std::size_t>(w.cols));
        const bool has_bias = bias != nullptr && bias->valid();
        for (std::int64_t r = 0; r < w.rows; ++r) {
            dequantize_row(w, r, row.data());
            const float b = has_bias ? load_scalar(bias->dtype, bias->data, r) : 0.0f;
            for (std::int64_t t = 0; t < n; ++t) {
                const float* xt = x + t * w.cols;
                float acc = 0.0f;
                for (std::int64_t c = 0; c < w.cols; ++c) acc += xt[c] * row[c];
                y[t * w.rows + r] = has_bias ? acc + b : acc;
            }
        }
    }

    void embed(const WeightMatrix& table, std::span<const std::int32_t> ids, float* out) override {
        for (std::size_t i = 0; i < ids.size(); ++i) {
            float* row = out + static_cast<std::int64_t>(i) * table.cols;
            if (ids[i] < 0 || ids[i] >= table.rows) {
                std::fill(row, row + table.cols, 0.0f);  // out of contract; never read past
                continue;
            }
            dequantize_row(table, ids[i], row);
        }
    }

    void rms_norm(const float* x, const WeightVector& weight, std::int64_t n, std::int64_t d,
                  float eps, float* y) override {
        for (std::int64_t i = 0; i < n; ++i) {
            const float* xi = x + i * d;
            float* yi = y + i * d;
            float sum_sq = 0.0f;
            for (std::int64_t j = 0; j < d; ++j) sum_sq += xi[j] * xi[j];
            const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps);
            for (std::int64_t j = 0; j < d; ++j) {
                yi[j] = (xi[j] * inv_rms) * load_scalar(weight.dtype, weight.data, j);
            }
        }
    }

    void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
              const std::int32_t* positions, std::span<const float> inv_freq,
              float attention_scaling) override {
        const auto n_freq = static_cast<std::int64_t>(inv_freq.size());
        for (std::int64_t t = 0; t < n_tokens; ++t) {
            const float pos = static_cast<float>(positions[t]);
            for (std::int64_t i = 0; i < n_freq; ++i) {
                const float theta = pos * inv_freq[static_cast<std::size_t>(i)];
                const float c =
                    static_cast<float>(std::cos(static_cast<double>(theta))) * attention_scaling;
                const float s =
                    static_cast<float>(std::sin(static_cast<double>(theta))) * attention_scaling;
                for (std::int64_t h = 0; h < n_heads; ++h) {
                    float* xh = x + (t * n_heads + h) * head_dim;
                    const float a = xh[i];
                    const float b = xh[i + n_freq];
                    xh[i] = a * c - b * s;
                    xh[i + n_freq] = b * c + a * s;
                }
            }
        }
    }

    void attention(const AttentionArgs& a) override {
        const std::int64_t group = a.n_heads / a.n_kv_heads;
        const std::int64_t d = a.head_dim;
        std::vector<float> scores(static_cast<std::size_t>(std::max<std::int64_t>(a.n_kv, 1)));
        // Element i of a K or V block, widened to f32.
        auto kv = [&](const void* base, std::int64_t i) {
            return load_scalar(a.kv_dtype, base, i);
        };
        for (std::int64_t i = 0; i < a.n_q; ++i) {
            const std::int64_t n_seen = std::clamp<std::int64_t>(a.q_pos0 + i + 1, 0, a.n_kv);
            for (std::int64_t h = 0; h < a.n_heads; ++h) {
                const float* q = a.q + (i * a.n_heads + h) * d;
                float* out = a.out + (i * a.n_heads + h) * d;
                const std::int64_t kvh = h / group;
                std::fill(out, out + d, 0.0f);
                if (n_seen == 0) continue;
                float max_score = -INFINITY;
                for (std::int64_t j = 0; j < n_seen; ++j) {
                    float dot = 0.0f;
                    for (std::int64_t c = 0; c < d; ++c) {
                        dot += q[c] * kv(a.k, key_element_index(a.k_layout, j, kvh * d + c,
                                                                a.n_kv_heads * d));
                    }
                    scores[j] = dot * a.scale;
                    max_score = std::max(max_score, scores[j]);
                }
                float sum = 0.0f;
                for (std::int64_t j = 0; j < n_seen; ++j) {
                    scores[j] = std::exp(scores[j] - max_score);
                    sum += scores[j];
                }
                const float inv_sum = 1.0f / sum;
                for (std::int64_t j = 0; j < n_seen; ++j) {
                    const float p = scores[j] * inv_sum;
                    const std::int64_t v = (j * a.n_kv_heads + kvh) * d;
                    for (std::int64_t c = 0; c < d; ++c) out[c] += p * kv(a.v, v + c);
                }
            }
        }
    }

    void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) override {
        for (std::int64_t i = 0; i < n; ++i) {
            const float g = gate[i];
            out[i] = g / (1.0f + std::exp(-g)) * up[i];
        }
    }

    void add(const float* a, const float* b, std::int64_t n, float* out) override {
        for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    }
};

}  // namespace

DeviceBuffer alloc_host_buffer(std::size_t bytes) {
    constexpr std::size_t kAlign = 64;
    const std::size_t rounded =
        std::max<std::size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) return {};
    std::memset(p, 0, rounded);
    return DeviceBuffer(p, bytes, &std::free);
}

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace brigade::model::cpu
