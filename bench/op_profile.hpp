#pragma once
// OpProfile: a Backend that forwards every op to another backend (model::ForwardingBackend) and
// times the compute and copy ops, so a bench can say where a decode step's time goes (issue 8):
// each matrix shape's matmuls next to the bytes they read, attention, the small vector ops, and
// whatever the engine does between ops.
//
// CPU backends are synchronous, so wall time around a call is the op's time. Timing costs two
// clock reads per op (~50 ns; a few hundred ops per token), so profiled runs are a little
// slower than plain ones and their tok/s is not reported as the speed.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/forwarding_backend.hpp"

namespace brigade::bench {

class OpProfile final : public model::ForwardingBackend {
public:
    // What one op name accumulated: calls, seconds, and for weight ops the bytes they read.
    struct Row {
        const char* kind = nullptr;
        std::int64_t rows = 0, cols = 0;  // of the op's (first) weight; 0 for other ops
        std::string op;
        std::uint64_t calls = 0;
        double seconds = 0.0;
        double bytes = 0.0;
        // Time from the end of the previous op to the start of this one: which op the
        // engine's own work (or a stall) comes before.
        double gap_before = 0.0;
    };

    explicit OpProfile(model::Backend& inner) : ForwardingBackend(inner) {}

    void reset() {
        rows_.clear();
        have_last_end_ = false;
    }
    const std::vector<Row>& rows() const { return rows_; }

    void write(model::DeviceBuffer& dst, std::size_t offset, const void* src,
               std::size_t bytes) override {
        timed("write", nullptr, 0.0, [&] { inner().write(dst, offset, src, bytes); });
    }
    void read(const model::DeviceBuffer& src, std::size_t offset, void* dst,
              std::size_t bytes) override {
        timed("read", nullptr, 0.0, [&] { inner().read(src, offset, dst, bytes); });
    }
    void store_as(const float* src, std::int64_t n, model::DType dtype, model::DeviceBuffer& dst,
                  std::size_t offset) override {
        timed("store_as", nullptr, 0.0, [&] { inner().store_as(src, n, dtype, dst, offset); });
    }
    void store_key_tiles(const float* src, std::int64_t n_rows, std::int64_t row_len,
                         std::int64_t pos0, model::DType dtype, model::DeviceBuffer& dst,
                         std::size_t offset) override {
        timed("store_key_tiles", nullptr, 0.0,
              [&] { inner().store_key_tiles(src, n_rows, row_len, pos0, dtype, dst, offset); });
    }
    void matmul(const model::WeightMatrix& w, const float* x, std::int64_t n, float* y,
                const model::WeightVector* bias) override {
        timed("matmul", &w, static_cast<double>(w.total_bytes()),
              [&] { inner().matmul(w, x, n, y, bias); });
    }
    void embed(const model::WeightMatrix& table, std::span<const std::int32_t> ids,
               float* out) override {
        timed("embed", nullptr, 0.0, [&] { inner().embed(table, ids, out); });
    }
    void rms_norm(const float* x, const model::WeightVector& weight, std::int64_t n, std::int64_t d,
                  float eps, float* y) override {
        timed("rms_norm", nullptr, 0.0, [&] { inner().rms_norm(x, weight, n, d, eps, y); });
    }
    void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
              const std::int32_t* positions, std::span<const float> inv_freq,
              float attention_scaling) override {
        timed("rope", nullptr, 0.0, [&] {
            inner().rope(x, n_tokens, n_heads, head_dim, positions, inv_freq, attention_scaling);
        });
    }
    void attention(const model::AttentionArgs& a) override {
        // K and V of every cached position of the sequence's KV heads.
        const double kv_bytes = 2.0 * static_cast<double>(a.n_kv * a.n_kv_heads * a.head_dim) *
                                static_cast<double>(sizeof(float));
        timed("attention", nullptr, kv_bytes, [&] { inner().attention(a); });
    }
    void attention_many(std::span<const model::AttentionArgs> batch) override {
        double kv_bytes = 0.0;
        for (const auto& a : batch) {
            kv_bytes += 2.0 * static_cast<double>(a.n_kv * a.n_kv_heads * a.head_dim) *
                        static_cast<double>(sizeof(float));
        }
        timed("attention_many", nullptr, kv_bytes, [&] { inner().attention_many(batch); });
    }
    void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) override {
        timed("silu_mul", nullptr, 0.0, [&] { inner().silu_mul(gate, up, n, out); });
    }
    void add(const float* a, const float* b, std::int64_t n, float* out) override {
        timed("add", nullptr, 0.0, [&] { inner().add(a, b, n, out); });
    }
    void matmul_many(std::span<const model::MatmulJob> jobs, const float* x,
                     std::int64_t n) override {
        double bytes = 0.0;
        for (const auto& j : jobs) bytes += static_cast<double>(j.w->total_bytes());
        // Keyed by the first matrix: a layer's q/k/v group is always the same jobs.
        timed("matmul_many (first)", jobs.empty() ? nullptr : jobs[0].w, bytes,
              [&] { inner().matmul_many(jobs, x, n); });
    }
    void gated_mlp_up(const model::WeightMatrix& gate, const model::WeightVector* b_gate,
                      const model::WeightMatrix& up, const model::WeightVector* b_up,
                      const float* x, std::int64_t n, float* out, float* up_scratch) override {
        timed("gated_mlp_up (gate)", &gate,
              static_cast<double>(gate.total_bytes() + up.total_bytes()),
              [&] { inner().gated_mlp_up(gate, b_gate, up, b_up, x, n, out, up_scratch); });
    }
    void run_host_tasks(std::int64_t n, void (*task)(void* ctx, std::int64_t i),
                        void* ctx) override {
        timed("host tasks", nullptr, 0.0, [&] { inner().run_host_tasks(n, task, ctx); });
    }
    void matmul_add(const model::WeightMatrix& w, const float* a, std::int64_t n,
                    const model::WeightVector* bias, float* residual, float* scratch) override {
        timed("matmul_add", &w, static_cast<double>(w.total_bytes()),
              [&] { inner().matmul_add(w, a, n, bias, residual, scratch); });
    }

    // Prints one table row per op, per step: calls, µs, share of the step, GB/s for ops that
    // read weights or KV; then the time of the step outside any op (the engine's own work).
    void print(const char* title, double step_seconds, int n_steps) const {
        std::vector<Row> sorted = rows_;
        std::sort(sorted.begin(), sorted.end(),
                  [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
        std::printf(
            "\n%s: %.1f µs per step\n\n| op | calls/step | µs/step | share | GB/s | µs/step "
            "before it |\n|---|---|---|---|---|---|\n",
            title, 1e6 * step_seconds);
        double in_ops = 0.0;
        for (const Row& r : sorted) {
            const double s = r.seconds / n_steps;
            in_ops += s;
            std::printf("| %s | %.1f | %.1f | %.1f%% | ", r.op.c_str(),
                        static_cast<double>(r.calls) / n_steps, 1e6 * s, 100.0 * s / step_seconds);
            if (r.bytes > 0.0 && r.seconds > 0.0) std::printf("%.1f", r.bytes / r.seconds / 1e9);
            std::printf(" | %.1f |\n", 1e6 * r.gap_before / n_steps);
        }
        const double outside = step_seconds - in_ops;
        std::printf("| (between ops) | | %.1f | %.1f%% | | |\n", 1e6 * outside,
                    100.0 * outside / step_seconds);
    }

private:
    static std::string shape(const model::WeightMatrix& w) {
        return std::to_string(w.rows) + "x" + std::to_string(w.cols);
    }

    // Rows are keyed by op kind and weight shape, found by a linear scan of a few dozen
    // entries: no string is built per call, so the profile adds little to "between ops".
    template <class F>
    void timed(const char* kind, const model::WeightMatrix* w, double bytes, F&& f) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        const auto t1 = std::chrono::steady_clock::now();
        const double s = std::chrono::duration<double>(t1 - t0).count();
        const double gap =
            have_last_end_ ? std::chrono::duration<double>(t0 - last_end_).count() : 0.0;
        last_end_ = t1;
        have_last_end_ = true;
        const std::int64_t rows = w != nullptr ? w->rows : 0;
        const std::int64_t cols = w != nullptr ? w->cols : 0;
        auto it = std::find_if(rows_.begin(), rows_.end(), [&](const Row& r) {
            return r.kind == kind && r.rows == rows && r.cols == cols;
        });
        if (it == rows_.end()) {
            std::string op = kind;
            if (w != nullptr) op += " " + shape(*w);
            rows_.push_back({kind, rows, cols, op, 0, 0.0, 0.0, 0.0});
            it = rows_.end() - 1;
        }
        ++it->calls;
        it->seconds += s;
        it->bytes += bytes;
        it->gap_before += gap;
    }

    std::vector<Row> rows_;
    std::chrono::steady_clock::time_point last_end_;
    bool have_last_end_ = false;
};

}  // namespace brigade::bench
