// The fused ops of the CPU backend at decode (n < gemm_min_tokens): several matrices of a
// layer in one fork-join of the pool, with their small epilogues (SiLU gate, residual add) run
// by the task that computed the rows. A decode step of a small model is otherwise dominated by
// waking the pool: Qwen2.5-0.5B's k and v projections are 128 rows each, ~0.2 MB of BF16, yet
// each paid a whole fork-join of every thread.
//
// Every matrix row is computed by the same kernel call as in a plain matmul (decode_rows on a
// range of rows), chunk boundaries fall on multiples of 4 rows (the largest row tile of the
// batched kernel), and the epilogues are element-wise ops whose result does not depend on the
// range they run over, so a fused op gives exactly the floats of the plain ops it replaces.

#include <algorithm>
#include <cmath>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/kernels.hpp"

namespace brigade::model::cpu {
namespace {

// Chunks of a job start and end on multiples of this many rows (or at the job's end): the
// batched decode kernel takes rows in register tiles of 2 or 4 from the start of its range and
// the rest one at a time, with different rounding, so aligned chunks give every row the same
// path however the rows are split.
constexpr std::int64_t kRowQuantum = 4;
// The AMX kernel takes 16 rows a tile: chunks of other sizes would leave rows of tiles idle.
constexpr std::int64_t kAmxRowQuantum = 16;

// Bytes a decode kernel streams per row of w (weights, scales and biases).
double row_cost(const WeightMatrix& w) {
    return static_cast<double>(w.total_bytes()) / static_cast<double>(w.rows);
}

}  // namespace

void silu_mul_uniform(const float* gate, const float* up, std::int64_t begin, std::int64_t end,
                      float* out) {
    // A multiple of every f32 vector length up to 2048 bits (SVE lengths that are not powers
    // of two would still take the scalar tail: correct, but not range-independent).
    constexpr std::int64_t kPad = 64;
    const std::int64_t body_end = begin + (end - begin) / kPad * kPad;
    if (body_end > begin) silu_mul_range(gate, up, begin, body_end, out);
    if (body_end >= end) return;
    // The tail through the vector path as well: padded with zeros (silu(0) * 0 = 0).
    float g[kPad] = {};
    float u[kPad] = {};
    const std::int64_t left = end - body_end;
    std::copy(gate + body_end, gate + end, g);
    std::copy(up + body_end, up + end, u);
    silu_mul_range(g, u, 0, kPad, g);
    std::copy(g, g + left, out + body_end);
}

void CpuBackend::prepare_decode_inputs(std::span<const WeightMatrix* const> matrices,
                                       const float* x, std::int64_t n,
                                       std::span<const DecodeInput*> out) {
    // Which preparation a matrix takes depends only on its bits and group size (x and n are
    // shared), so q, k and v, or gate and up, usually share one.
    std::size_t n_ready = 0;
    for (std::size_t i = 0; i < matrices.size(); ++i) {
        const WeightMatrix* w = matrices[i];
        out[i] = nullptr;
        if (w == nullptr) continue;
        for (std::size_t k = 0; k < n_ready; ++k) {
            const DecodeInput& ready = decode_inputs_[k];
            if (ready.bits == w->bits && ready.group_size == w->group_size) {
                out[i] = &ready;
                break;
            }
        }
        if (out[i] != nullptr) continue;
        decode_inputs_[n_ready] = prepare_decode(*w, x, n, decode_scratch_[n_ready]);
        out[i] = &decode_inputs_[n_ready];
        ++n_ready;
    }
}

void CpuBackend::run_decode_jobs(std::span<const DecodeJob> jobs, const float* x, std::int64_t n) {
    const auto n_jobs = static_cast<std::int64_t>(jobs.size());
    if (n_jobs == 0) return;
    // Rows of different jobs cost different bytes (formats, paired matrices): chunks are cut
    // at equal fractions of the bytes, so the threads finish together.
    std::array<double, kMaxDecodeJobs + 1> start{};
    std::array<double, kMaxDecodeJobs> cost{};
    std::int64_t total_rows = 0;
    std::int64_t quantum = kRowQuantum;
    for (std::int64_t j = 0; j < n_jobs; ++j) {
        const DecodeJob& job = jobs[static_cast<std::size_t>(j)];
        if (job.in->kernel == DecodeInput::Kernel::kAmx ||
            job.in->kernel == DecodeInput::Kernel::kAmxBf16) {
            quantum = kAmxRowQuantum;
        }
        cost[j] = row_cost(*job.w) + (job.paired != nullptr ? row_cost(*job.paired) : 0.0);
        start[j + 1] = start[j] + cost[j] * static_cast<double>(job.w->rows);
        total_rows += job.w->rows;
    }
    // Up to max_chunks_per_thread chunks per thread (claimed dynamically, so a late thread
    // does not hold up the rest) while chunks keep `quantum` rows; never fewer chunks than
    // threads while there are rows enough for one each.
    const std::int64_t n_threads = pool_.size();
    std::int64_t per_thread = std::max<std::int64_t>(1, tuning_.max_chunks_per_thread);
    while (per_thread > 1 && total_rows < per_thread * n_threads * quantum) per_thread /= 2;
    const std::int64_t n_chunks = std::max<std::int64_t>(
        1, std::min((total_rows + quantum - 1) / quantum, per_thread * n_threads));

    // Boundary c is (job, row): the row nearest to fraction c / n_chunks of the bytes, on a
    // multiple of `quantum`, or (next job, 0) at a job's end. Boundary n_chunks = (n_jobs, 0).
    chunk_job_.resize(static_cast<std::size_t>(n_chunks + 1));
    chunk_row_.resize(static_cast<std::size_t>(n_chunks + 1));
    for (std::int64_t c = 0; c <= n_chunks; ++c) {
        const double target =
            start[n_jobs] * static_cast<double>(c) / static_cast<double>(n_chunks);
        std::int64_t j = 0;
        while (j + 1 < n_jobs && start[j + 1] <= target) ++j;
        const std::int64_t rows = jobs[static_cast<std::size_t>(j)].w->rows;
        const double quanta = (target - start[j]) / (cost[j] * static_cast<double>(quantum));
        std::int64_t row = std::clamp<std::int64_t>(std::llround(quanta) * quantum, 0, rows);
        if (c == n_chunks || (row == rows)) {
            ++j;
            row = 0;
        }
        if (c == n_chunks) j = n_jobs;
        chunk_job_[static_cast<std::size_t>(c)] = j;
        chunk_row_[static_cast<std::size_t>(c)] = row;
    }

    auto run_rows = [&](const DecodeJob& job, std::int64_t r0, std::int64_t r1, int thread) {
        const std::int64_t ld = job.w->rows;
        decode_rows(*job.w, *job.in, x, n, r0, r1, job.bias, job.y, thread);
        if (job.paired != nullptr) {
            decode_rows(*job.paired, *job.in2, x, n, r0, r1, job.bias2, job.y2, thread);
            for (std::int64_t t = 0; t < n; ++t) {
                silu_mul_uniform(job.y + t * ld, job.y2 + t * ld, r0, r1, job.y + t * ld);
            }
        }
        if (job.residual != nullptr) {
            for (std::int64_t t = 0; t < n; ++t) {
                add_range(job.residual + t * ld, job.y + t * ld, r0, r1, job.residual + t * ld);
            }
        }
    };
    pool_.parallel_for(n_chunks, [&](std::int64_t chunk, int thread) {
        const auto c = static_cast<std::size_t>(chunk);
        const std::int64_t j_end = chunk_job_[c + 1];
        const std::int64_t r_end = chunk_row_[c + 1];
        for (std::int64_t j = chunk_job_[c]; j <= j_end && j < n_jobs; ++j) {
            const DecodeJob& job = jobs[static_cast<std::size_t>(j)];
            const std::int64_t r0 = j == chunk_job_[c] ? chunk_row_[c] : 0;
            const std::int64_t r1 = j == j_end ? r_end : job.w->rows;
            if (r0 < r1) run_rows(job, r0, r1, thread);
        }
    });
}

void CpuBackend::matmul_many(std::span<const MatmulJob> jobs, const float* x, std::int64_t n) {
    if (n <= 0) return;
    if (n >= tuning_.gemm_min_tokens) {
        Backend::matmul_many(jobs, x, n);  // prompt processing: a whole sgemm per matrix
        return;
    }
    // Groups of kMaxDecodeJobs matrices per fork-join (a layer has at most 3 of one input).
    std::array<DecodeJob, kMaxDecodeJobs> group;
    std::array<const WeightMatrix*, kMaxDecodeJobs> matrices{};
    std::array<const DecodeInput*, kMaxDecodeJobs> inputs{};
    std::size_t n_group = 0;
    auto flush = [&] {
        if (n_group == 0) return;
        prepare_decode_inputs({matrices.data(), n_group}, x, n, {inputs.data(), n_group});
        for (std::size_t i = 0; i < n_group; ++i) group[i].in = inputs[i];
        run_decode_jobs({group.data(), n_group}, x, n);
        n_group = 0;
    };
    for (const MatmulJob& j : jobs) {
        if (j.w->rows <= 0) continue;
        group[n_group] = DecodeJob{};
        group[n_group].w = j.w;
        group[n_group].y = j.y;
        group[n_group].bias = j.bias;
        matrices[n_group] = j.w;
        if (++n_group == kMaxDecodeJobs) flush();
    }
    flush();
}

void CpuBackend::gated_mlp_up(const WeightMatrix& gate, const WeightVector* b_gate,
                              const WeightMatrix& up, const WeightVector* b_up, const float* x,
                              std::int64_t n, float* out, float* up_scratch) {
    if (n <= 0 || gate.rows <= 0) return;
    if (n >= tuning_.gemm_min_tokens || up.rows != gate.rows) {
        Backend::gated_mlp_up(gate, b_gate, up, b_up, x, n, out, up_scratch);
        return;
    }
    const WeightMatrix* matrices[] = {&gate, &up};
    const DecodeInput* inputs[2] = {};
    prepare_decode_inputs(matrices, x, n, inputs);
    DecodeJob job;
    job.w = &gate;
    job.y = out;
    job.bias = b_gate;
    job.in = inputs[0];
    job.paired = &up;
    job.y2 = up_scratch;
    job.bias2 = b_up;
    job.in2 = inputs[1];
    run_decode_jobs({&job, 1}, x, n);
}

void CpuBackend::matmul_add(const WeightMatrix& w, const float* a, std::int64_t n,
                            const WeightVector* bias, float* residual, float* scratch) {
    if (n <= 0 || w.rows <= 0) return;
    if (n >= tuning_.gemm_min_tokens) {
        Backend::matmul_add(w, a, n, bias, residual, scratch);
        return;
    }
    matmul_decode(w, a, n, scratch, bias, residual);
}

}  // namespace brigade::model::cpu
