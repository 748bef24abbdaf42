#pragma once
// A Backend that forwards every op to another one. Decorators derive from it to change or watch
// a few ops and leave the rest as they are: the bench's op profile times each op, tests keep the
// fused defaults or record what a stage asks for. An op added to Backend is forwarded here once,
// so no decorator silently drops it (as the profile once would have dropped a stage's
// set_rows_are_decode_steps, and profiled another kernel than the engine runs).

#include "model/backend.hpp"

namespace brigade::model {

class ForwardingBackend : public Backend {
public:
    explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
    // Not copyable: given another decorator, `ForwardingBackend outer(decorator)` would pick the
    // copy constructor and forward to what that one wraps, skipping it. Pass it as a Backend&.
    ForwardingBackend(const ForwardingBackend&) = delete;
    ForwardingBackend& operator=(const ForwardingBackend&) = delete;

    std::string_view name() const override { return inner_.name(); }
    BackendKind kind() const override { return inner_.kind(); }
    bool supports(const WeightMatrix& w) const override { return inner_.supports(w); }
    DeviceBuffer alloc(std::size_t bytes) override { return inner_.alloc(bytes); }
    WeightMatrix upload(const WeightMatrix& host) override { return inner_.upload(host); }
    WeightVector upload(const WeightVector& host) override { return inner_.upload(host); }
    void write(DeviceBuffer& dst, std::size_t offset, const void* src, std::size_t n) override {
        inner_.write(dst, offset, src, n);
    }
    void read(const DeviceBuffer& src, std::size_t offset, void* dst, std::size_t n) override {
        inner_.read(src, offset, dst, n);
    }
    void store_as(const float* src, std::int64_t n, DType dtype, DeviceBuffer& dst,
                  std::size_t offset) override {
        inner_.store_as(src, n, dtype, dst, offset);
    }
    void store_key_tiles(const float* src, std::int64_t n_rows, std::int64_t row_len,
                         std::int64_t pos0, DType dtype, DeviceBuffer& dst,
                         std::size_t offset) override {
        inner_.store_key_tiles(src, n_rows, row_len, pos0, dtype, dst, offset);
    }
    void synchronize() override { inner_.synchronize(); }
    void run_host_tasks(std::int64_t n, void (*task)(void* ctx, std::int64_t i),
                        void* ctx) override {
        inner_.run_host_tasks(n, task, ctx);
    }
    void set_rows_are_decode_steps(bool decode_steps) override {
        inner_.set_rows_are_decode_steps(decode_steps);
    }
    void matmul(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                const WeightVector* bias) override {
        inner_.matmul(w, x, n, y, bias);
    }
    void embed(const WeightMatrix& table, std::span<const std::int32_t> ids, float* out) override {
        inner_.embed(table, ids, out);
    }
    void rms_norm(const float* x, const WeightVector& weight, std::int64_t n, std::int64_t d,
                  float eps, float* y) override {
        inner_.rms_norm(x, weight, n, d, eps, y);
    }
    void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
              const std::int32_t* positions, std::span<const float> inv_freq,
              float attention_scaling) override {
        inner_.rope(x, n_tokens, n_heads, head_dim, positions, inv_freq, attention_scaling);
    }
    void attention(const AttentionArgs& args) override { inner_.attention(args); }
    void attention_many(std::span<const AttentionArgs> batch) override {
        inner_.attention_many(batch);
    }
    void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) override {
        inner_.silu_mul(gate, up, n, out);
    }
    void add(const float* a, const float* b, std::int64_t n, float* out) override {
        inner_.add(a, b, n, out);
    }
    void matmul_many(std::span<const MatmulJob> jobs, const float* x, std::int64_t n) override {
        inner_.matmul_many(jobs, x, n);
    }
    void gated_mlp_up(const WeightMatrix& gate, const WeightVector* b_gate, const WeightMatrix& up,
                      const WeightVector* b_up, const float* x, std::int64_t n, float* out,
                      float* up_scratch) override {
        inner_.gated_mlp_up(gate, b_gate, up, b_up, x, n, out, up_scratch);
    }
    void matmul_add(const WeightMatrix& w, const float* a, std::int64_t n, const WeightVector* bias,
                    float* residual, float* scratch) override {
        inner_.matmul_add(w, a, n, bias, residual, scratch);
    }

protected:
    Backend& inner() { return inner_; }

private:
    Backend& inner_;
};

}  // namespace brigade::model
