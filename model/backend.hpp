#pragma once
// The compute interface of a pipeline stage (house guide §3). Ops work at the granularity of a
// matrix or a layer, so a virtual call is paid per op and per batch, never per element.
//
// Activations are row-major f32 arrays in memory owned by the backend (`alloc`): host memory
// for the CPU backends, device memory for a GPU backend. Weights are `WeightMatrix` views made
// resident with `upload` (a no-op view for CPU backends over a memory-mapped checkpoint).
//
// Every backend is tested against `make_backend(BackendKind::kReference)`, the plain scalar
// implementation that defines the numbers.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "model/errors.hpp"
#include "model/tensor.hpp"

namespace brigade::model {

// Memory allocated by a backend. Move-only; frees itself.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(void* data, std::size_t bytes, void (*free_fn)(void*))
        : data_(data), bytes_(bytes), free_(free_fn) {}
    DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        DeviceBuffer tmp(std::move(o));
        swap(tmp);
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (data_ != nullptr && free_ != nullptr) free_(data_);
    }

    void* data() const { return data_; }
    float* f32() const { return static_cast<float*>(data_); }
    std::size_t bytes() const { return bytes_; }

private:
    void swap(DeviceBuffer& o) noexcept {
        std::swap(data_, o.data_);
        std::swap(bytes_, o.bytes_);
        std::swap(free_, o.free_);
    }
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
    void (*free_)(void*) = nullptr;
};

// How a block of keys is laid out. kRows: key i's kv_dim elements in a row, [n_kv, kv_dim].
// kTiles: tiles of kKeyTile consecutive keys, each [kv_dim][kKeyTile], so one vector load takes
// the same element of kKeyTile keys and decode's QKᵀ makes a vector of scores with FMAs alone,
// no horizontal sums (the KV cache's f16 keys; a block holds whole tiles, ceil(n / kKeyTile)).
enum class KeyLayout : std::uint8_t { kRows, kTiles };
inline constexpr std::int64_t kKeyTile = 16;

// Index of element e of key i in a block of `layout` with rows of kv_dim elements.
inline std::int64_t key_element_index(KeyLayout layout, std::int64_t i, std::int64_t e,
                                      std::int64_t kv_dim) {
    if (layout == KeyLayout::kRows) return i * kv_dim + e;
    return ((i / kKeyTile) * kv_dim + e) * kKeyTile + i % kKeyTile;
}

// Causal grouped-query attention of one sequence against its cached keys and values.
// Query head h uses KV head h / (n_heads / n_kv_heads) (HF `repeat_kv` grouping).
struct AttentionArgs {
    const float* q = nullptr;  // [n_q, n_heads, head_dim], already rotated
    // Keys [n_kv, n_kv_heads, head_dim] (positions 0..n_kv-1, rotated) and values, of kv_dtype:
    // F32, or F16 (the KV cache's half-size rows, widened to f32 as they are read).
    const void* k = nullptr;
    const void* v = nullptr;
    DType kv_dtype = DType::kF32;
    KeyLayout k_layout = KeyLayout::kRows;  // of k; values are always rows
    float* out = nullptr;                   // [n_q, n_heads, head_dim]
    std::int64_t n_q = 0;
    std::int64_t n_kv = 0;
    std::int64_t n_heads = 0;
    std::int64_t n_kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t q_pos0 = 0;  // absolute position of query 0; query i sees keys 0..q_pos0+i
    float scale = 0.0f;       // usually head_dim^-0.5
};

// One matmul of a group that shares its input (`Backend::matmul_many`): y[n, w.rows] =
// x[n, w.cols] · Wᵀ (+ bias where valid).
struct MatmulJob {
    const WeightMatrix* w = nullptr;
    float* y = nullptr;
    const WeightVector* bias = nullptr;  // null or invalid: none
};

enum class BackendKind {
    kReference,  // scalar loops, one thread: the definition of correct
    kCpu,        // SIMD (Highway) + thread pool + BLAS for prompt processing
    kCuda,
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual std::string_view name() const = 0;
    virtual BackendKind kind() const = 0;
    // Host threads the backend computes on.
    virtual int compute_threads() const { return 1; }
    // Whether `matmul`/`embed` can take this weight format (dtype, bits, group size).
    virtual bool supports(const WeightMatrix& w) const = 0;

    // Memory. `alloc` returns zero-filled memory usable by the ops below.
    virtual DeviceBuffer alloc(std::size_t bytes) = 0;
    // Makes a weight usable by this backend. CPU backends return the same view (zero copy);
    // a GPU backend copies into device memory it keeps alive until the backend is destroyed.
    virtual WeightMatrix upload(const WeightMatrix& host) = 0;
    virtual WeightVector upload(const WeightVector& host) = 0;
    // Host <-> backend memory for activations.
    virtual void write(DeviceBuffer& dst, std::size_t offset_bytes, const void* src,
                       std::size_t bytes) = 0;
    virtual void read(const DeviceBuffer& src, std::size_t offset_bytes, void* dst,
                      std::size_t bytes) = 0;
    // Stores n floats of backend memory `src` into `dst` from byte `offset_bytes` on, as
    // `dtype`: F32 copies; F16 rounds to nearest even and saturates magnitudes past 65504 to
    // ±65504 (a key that overflowed to inf would turn every score of its head into NaN).
    // The KV cache writes its rows this way.
    virtual void store_as(const float* src, std::int64_t n, DType dtype, DeviceBuffer& dst,
                          std::size_t offset_bytes) = 0;
    // Stores n_rows rows of row_len floats of backend memory `src` (row i at src + i * row_len)
    // as keys pos0 .. pos0 + n_rows - 1 of a block of tiled keys (KeyLayout::kTiles) that starts
    // at byte `offset_bytes` of `dst`, converted as store_as does. The KV cache writes its f16
    // keys this way.
    virtual void store_key_tiles(const float* src, std::int64_t n_rows, std::int64_t row_len,
                                 std::int64_t pos0, DType dtype, DeviceBuffer& dst,
                                 std::size_t offset_bytes) = 0;
    // Waits until all queued work is done (no-op on synchronous backends).
    virtual void synchronize() = 0;
    // Host work between ops: task(ctx, i) for every i in [0, n), on the backend's host threads
    // where it has them (the CPU backend's pool), else one after another on this thread;
    // returns when all have run. Tasks must be independent of each other, must not call the
    // backend and must not throw (on a pool thread an exception ends the process). (A stage samples
    // a batch's requests this way: each one's sampler is its own state.) for_each_host_task below
    // takes a lambda.
    virtual void run_host_tasks(std::int64_t n, void (*task)(void* ctx, std::int64_t i),
                                void* ctx) {
        for (std::int64_t i = 0; i < n; ++i) task(ctx, i);
    }

    // What the rows of the following ops are, until said again: true while they are decode
    // steps (one new token per sequence), false (the start) while prompt tokens are among
    // them. A backend may then round activations as its decode path does (the CPU backend's
    // AMX tiles: two int8 digits instead of four, CpuTuning::amx_decode_two_digits), so that
    // prompts keep f32-class precision. A stage says it at every batch.
    virtual void set_rows_are_decode_steps(bool) {}

    // y[n, w.rows] = x[n, w.cols] · Wᵀ, then + bias[w.rows] if `bias` is valid.
    virtual void matmul(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                        const WeightVector* bias = nullptr) = 0;
    // out[i, :] = table row ids[i], dequantized to f32. Ids must be < table.rows.
    virtual void embed(const WeightMatrix& table, std::span<const std::int32_t> ids,
                       float* out) = 0;
    // y[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight, for n rows of width d.
    // x and y may alias.
    virtual void rms_norm(const float* x, const WeightVector& weight, std::int64_t n,
                          std::int64_t d, float eps, float* y) = 0;
    // Rotates x[n_tokens, n_heads, head_dim] in place, HF "rotate_half" convention (pairs i and
    // i + rot_dims/2) on the first `rot_dims` = 2 * n_freq dims; the rest pass through.
    // Angle of pair i for token t = positions[t] * inv_freq[i]; cos and sin are multiplied
    // by `attention_scaling` (1 except for yarn/longrope).
    virtual void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
                      const std::int32_t* positions, std::span<const float> inv_freq,
                      float attention_scaling) = 0;
    virtual void attention(const AttentionArgs& args) = 0;
    // The attention of several sequences (a decode batch), each exactly as one attention call;
    // a backend overrides it to run them together (the CPU backend: one parallel region for
    // all, instead of one or two per sequence and layer).
    virtual void attention_many(std::span<const AttentionArgs> batch) {
        for (const AttentionArgs& a : batch) attention(a);
    }
    // out[i] = silu(gate[i]) * up[i]; out may alias gate.
    virtual void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) = 0;
    // out[i] = a[i] + b[i]; out may alias a.
    virtual void add(const float* a, const float* b, std::int64_t n, float* out) = 0;

    // Fused ops of the decoder layer. Each gives exactly the floats of the plain ops it
    // replaces (the default implementations below); a backend overrides them to run the work
    // in fewer parallel regions (the CPU backend: one fork-join instead of two or three per
    // op at decode, where a layer's small matrices cost less than waking the pool).
    //
    // Every job's matmul of one input x[n, cols] (q, k and v of a layer). Outputs must not
    // overlap x or each other.
    virtual void matmul_many(std::span<const MatmulJob> jobs, const float* x, std::int64_t n) {
        for (const MatmulJob& j : jobs) matmul(*j.w, x, n, j.y, j.bias);
    }
    // The gated MLP's first half: out[n, gate.rows] = silu(x·gateᵀ + b_gate) * (x·upᵀ + b_up).
    // `up_scratch` holds n * up.rows floats the backend may use; out must not overlap x.
    virtual void gated_mlp_up(const WeightMatrix& gate, const WeightVector* b_gate,
                              const WeightMatrix& up, const WeightVector* b_up, const float* x,
                              std::int64_t n, float* out, float* up_scratch) {
        matmul(gate, x, n, out, b_gate);
        matmul(up, x, n, up_scratch, b_up);
        silu_mul(out, up_scratch, n * gate.rows, out);
    }
    // A projection into the residual stream: residual[n, w.rows] += a[n, w.cols]·Wᵀ + bias,
    // rounded as matmul then add. `scratch` holds n * w.rows floats the backend may use.
    virtual void matmul_add(const WeightMatrix& w, const float* a, std::int64_t n,
                            const WeightVector* bias, float* residual, float* scratch) {
        matmul(w, a, n, scratch, bias);
        add(residual, scratch, n * w.rows, residual);
    }
};

// f(i) for every i in [0, n) through backend.run_host_tasks.
template <class F>
void for_each_host_task(Backend& backend, std::int64_t n, F&& f) {
    using Fn = std::remove_reference_t<F>;
    backend.run_host_tasks(
        n, [](void* ctx, std::int64_t i) { (*static_cast<Fn*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&f)));
}

struct BackendOptions {
    // 0: the CPU backend chooses (thread_count.hpp: every usable CPU unless fewer threads
    // measurably run fork-joins faster).
    int n_threads = 0;
    // kCpu: decode matmuls (1-4 tokens) on MLX-quantized weights round activations to int16
    // per group and use integer dot products (relative error ~1e-5 per matmul,
    // model/cpu/matmul_int16.cpp; on AVX-512 VNNI, 4- and 8-bit rows in tiles with vpdpwssd). Off
    // by default: over a whole model the error reaches ~1e-3 of the logits (1.4e-3 - 3.5e-3 on the
    // quantized HF fixtures), beyond their parity tolerance (~6e-4), and decode would then differ
    // slightly from prefill. Demo model perplexity (decode token by token): q4 44.14669
    // -> 44.14687, q8 39.92162 -> 39.92159 (int8 activations: +0.46% / +0.56%). Opt in for speed.
    bool cpu_int16_activations = false;
    // kCpu: decode matmuls (1-4 tokens) on MLX 4- and 8-bit weights round activations to int8
    // per weight group and use integer dot products (AVX-512 VNNI / AVX-VNNI / AVX2,
    // model/cpu/matmul_int8.cpp; takes precedence over cpu_int16_activations). Off by default:
    // each output moves by up to step/2 · Σ|scale·q| per group (step = max|x_g| / 127), far
    // beyond the Hugging Face parity tolerance. Measured on the demo model (MLX g64, decode
    // token by token): logits move by ~3% relative (L2, median; up to 9%), held-out perplexity
    // rises 0.4% (q8: 38.46 -> 38.63) and 0.6% (q4: 42.24 -> 42.50), and greedy continuations
    // follow the f32 ones for 24-38% of their tokens before they diverge. Prompts (more than 4
    // tokens per matmul) are not affected. Opt in for speed where that is acceptable.
    bool cpu_int8_activations = false;
    // kCpu, where the CPU has AVX2 (VNNI or not) or Arm sdot: one- and two-token decode
    // matmuls on MLX 4-bit weights (8-bit too with AVX-512 VNNI) split each activation into two
    // int8 digits, within
    // 3.1e-5 · max|x_g| of it, and use integer dot products (model/cpu/matmul_split_int8.cpp
    // says why that precision suffices: held-out perplexity moves by 3.4e-5 relative).
    // On by default. false: the f32 kernels (for comparison).
    bool cpu_split_int8_activations = true;
    // kCpu, where the CPU and OS offer AMX tiles (Xeon from Sapphire Rapids on, Linux 5.16+):
    // decode batches (4- and 8-bit weights from 3 tokens, BF16 from 12, from 8 on matrices of
    // 2048 x 2048 or more; up to 31) and
    // prompts on 4/8-bit (with the split-int8 digits) and BF16 weights go through tile
    // multiplies (model/cpu/matmul_amx*.cpp). false: never.
    bool cpu_amx = true;
};

Result<std::unique_ptr<Backend>> make_backend(BackendKind kind, const BackendOptions& options = {});

}  // namespace brigade::model
