// engine_bench: load time, prompt processing and decode speed of the engine on random
// checkpoints shaped like real models (issues 2 and 8), each next to the bound this machine
// allows, measured in the same run:
//
//   prompt processing (--prompts 512,4096): tok/s vs the rate OpenBLAS sgemm reaches on the
//       model's layer matrix shapes at that many tokens (f32 weights, all threads), applied to
//       the prompt's matmul and causal-attention flops
//   decode, 1 sequence: tok/s vs read bandwidth / (weight + KV bytes read per token)
//   decode, 4 and 16 sequences batched: aggregate tok/s vs the larger of the bandwidth time
//       and the flops at the sgemm rate, and the speed-up over 1 sequence
//   long context (--contexts 8192,32768): decode with that many cached positions (K/V filled
//       with random values, no prefill) vs the bandwidth bound, and vs "1-sequence decode time
//       plus the extra KV bytes at the measured bandwidth" (what the longer context explains)
//   read bandwidth: every thread sums its slice of a 1 GiB buffer, at the start and before
//       each case; all bounds use the highest measurement of the run
//   decode loop: model::generate (engine step + sampling over the vocabulary), greedy and at
//       temperature 0.7 / top_p 0.9: the speed `brigade run` shows; three of each alternated,
//       medians, and the sampled loop's share of the greedy one (median of the rounds)
//   decode cases also print the CPU backend's thread-pool fork-joins per step (ThreadPool::
//       n_dispatches): the per-token overhead that fused layer ops cut
//
//   engine_bench [--models qwen2.5-0.5b,llama-3.2-1b] [--formats bf16,q8,q4]
//                (--models llama-3.1-8b: that shape too, not in the default set: 4.5 GB in q4)
//                [--prompts 512,4096] [--contexts 8192,32768] [--decode 32] [--threads 0]
//                [--backend cpu] [--layers N] [--dir DIR] [--keep] [--json FILE]
//                [--activations default|f32|int16|int8] [--profile] [--attention-min-keys N]
//                [--batched-min-tokens N] [--batches 4,16] [--ab KNOB[=VALUE]] [--kv-f32]
//                [--isa native|avx512|avx2-vnni|avx2]
//
// --isa: hold the CPU kernels to a smaller x86 instruction set, so that one many-core machine
// stands in for others (same cores and memory, narrower kernels): avx512 = AVX-512 without AMX
// (Zen 4, Ice Lake, Cascade Lake); avx2-vnni = Highway's AVX2 target with split-int8 at AVX-VNNI
// (Alder Lake and later client cores); avx2 = Highway's AVX2 target, split-int8 through
// vpmaddubsw + vpmaddwd (Zen 2/3, Haswell to Comet Lake). OpenBLAS (prompts) picks its own kernels:
// set OPENBLAS_CORETYPE=Haswell as well to hold it to AVX2.
// --ab KNOB: after the one-sequence decode, decode as many steps again alternating (A, B, B, A,
// ...) between the CPU backend as configured (A) and with one CpuTuning knob changed (B), and
// print both speeds; the same after each batch of --batches, for each of --prompts and after each
// of --contexts (twice the context's steps, after 4 untimed ones). The lent
// VMs' speed drifts by 10-20% between runs (bench/RESULTS.md), so two separate runs cannot resolve
// a change of a few percent; steps a few ms apart can. KNOB is NAME or NAME=VALUE: split-int8
// (CpuTuning::split_int8_activations, flipped), amx (CpuTuning::amx, flipped),
// amx-block-prefetch (CpuTuning::amx_prefetch_next_block, flipped), attention-prefetch
// (CpuTuning::attention_prefetch_heads, flipped), attention-all-heads
// (CpuTuning::attention_fewer_heads_per_tile, flipped), attention-stream-keys=N
// (attention_stream_prefetch_keys: decode attention asks for K and V N keys ahead; 0: never),
// prefetch-bytes=N,
// attention-min-keys=N (min_keys_per_split), attention-splits=N (long_context_splits_per_thread),
// long-split-keys=N (min_keys_per_long_split), amx-prepare-serial=N (amx_prepare_serial_below),
// split-int8-serial=N (split_int8_prepare_serial_below), amx-min-tokens=N,
// amx-8bit-min-tokens=N, amx-bf16-min-tokens=N (from how many tokens 4-bit, 8-bit and BF16
// weights decode through AMX tiles), chunks-per-thread=N (max_chunks_per_thread),
// split-int8-max-tokens=N (up to how many tokens 4-bit decode takes the split-int8 kernel),
// split-int8-decode-max-tokens=N and split-int8-decode-max-tokens-256=N (up to how many decode
// steps AVX-512's and the 256-bit split-int8 kernels take without AMX),
// split-int8-pair (CpuTuning::split_int8_pair, flipped), next-tile-prefetch=N
// (next_tile_prefetch_row_bytes: rows up to N bytes prefetch the next row tile; 0: never),
// q4-lookup (CpuTuning::q4_lookup, flipped), multi-row (CpuTuning::grouped_multi_row,
// flipped), or none
// (B = A: what the harness itself makes of two equal settings; on the lent Xeon B / A came out
// 0.999-1.019 in ten cases of 96-128 steps, so differences under about 2% are not resolved).
//
// --batched-min-tokens N: CpuTuning::batched_min_tokens, from how many tokens a decode batch
// puts the tokens along the vector (5: always; 1000: never), to compare the two batched
// kernels in one run.
// --batches: how many sequences the batched-decode cases decode together (at most 31 take the
// decode kernels; from gemm_min_tokens on, a step's matmuls are prompt-style panels).
// --attention-min-keys N: the CPU backend's CpuTuning::min_keys_per_split (how finely decode
// attention splits the keys over threads), to compare split sizes in the engine.
// --profile: decode cases also print where a step's time goes, op by op (bench/op_profile.hpp:
// each weight shape's matmuls with their GB/s, attention, vector ops, time between ops); the
// timing wrapper slows every op a little, so compare tok/s from runs without it.
// --activations int16 / int8 (--int8-activations = int8): the CPU backend decodes on q8/q4
// weights with activations rounded to int16 per group (BackendOptions::cpu_int16_activations)
// or to int8 (1-4 tokens, cpu_int8_activations); formats are reported as "q4+int16", "q8+int8".
// --activations f32: the f32 decode kernels where the default would split activations into
// int8 digits (cpu_split_int8_activations; 4-bit with AVX2 or Arm sdot; 8-bit with AVX-512),
// reported as "q4+f32". The default ("default") is what serving uses.
//
// Checkpoints are written once into DIR (default: a fresh temp dir, removed at exit unless
// --keep) as BF16 safetensors, or MLX affine 8-bit / 4-bit group 64 quantized with
// model/io/quantize (BF16 scales, as mlx_lm.convert stores them for a BF16 model).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_checkpoints.hpp"
#include "bench/cpu_tuning_choice.hpp"
#include "bench/engine_report.hpp"
#include "bench/op_profile.hpp"
#include "bench/read_bandwidth.hpp"
#include "model/backend.hpp"
#include "model/cpu/blas_gemm.hpp"
#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/thread_count.hpp"
#include "model/cpu/thread_pool.hpp"
#include "model/cpu/weight_decode.hpp"
#include "model/forward.hpp"
#include "model/generate.hpp"
#include "model/io/quantize.hpp"
#include "model/io/safetensors_writer.hpp"

namespace {

using brigade::model::BackendKind;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

using brigade::bench::ab_knob_list;
using brigade::bench::EngineResult;
using brigade::bench::FastRng;
using brigade::bench::hold_kernels_to_isa;
using brigade::bench::isa_unavailable;
using brigade::bench::kLlama1b;
using brigade::bench::kLlama8b;
using brigade::bench::knob_applied;
using brigade::bench::kQwen05;
using brigade::bench::Shape;
using brigade::bench::StreamingCheckpointWriter;

// The middle value (the mean of the two middle ones for an even count); 0 for none.
double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

// Read bandwidth on the CPU backend's own kind of persistent pool (an earlier version started
// threads inside the timed region and measured ~40% low): 1 GiB, best of 8 passes.
double measure_bandwidth_gbs(int n_threads) {
    brigade::model::cpu::ThreadPool pool(n_threads);
    return brigade::bench::measure_read_bandwidth_gbs(pool, std::size_t{1} << 30, 8);
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (pos <= s.size()) {
        auto comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        if (comma > pos) out.push_back(s.substr(pos, comma - pos));
        pos = comma + 1;
    }
    return out;
}

// Weight bytes one decode step reads: every layer matrix and the lm_head (embedding lookups
// read one row per token; norms and biases are negligible).
double decode_bytes(const brigade::model::StageWeights& w) {
    double bytes = static_cast<double>(w.lm_head.total_bytes());
    for (const auto& l : w.layers) {
        for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            bytes += static_cast<double>(m->total_bytes());
        }
    }
    return bytes;
}

// GFLOP/s OpenBLAS sgemm reaches with all threads on the model's layer matmuls at n tokens:
// total flops / total time over one layer's matrices (f32 weights, best of 2).
double sgemm_rate_gflops(const Shape& s, std::int64_t n, int n_threads) {
    namespace cpu = brigade::model::cpu;
    if (!cpu::have_blas()) return 0.0;
    const std::int64_t q = static_cast<std::int64_t>(s.heads) * s.head_dim;
    const std::int64_t kv = static_cast<std::int64_t>(s.kv_heads) * s.head_dim;
    const std::int64_t shapes[][2] = {{q, s.hidden},
                                      {kv, s.hidden},
                                      {kv, s.hidden},
                                      {s.hidden, q},
                                      {s.intermediate, s.hidden},
                                      {s.intermediate, s.hidden},
                                      {s.hidden, s.intermediate}};
    FastRng rng;
    cpu::blas_set_threads(n_threads);
    double flops = 0, seconds = 0;
    for (const auto& sh : shapes) {
        std::vector<float> w(static_cast<std::size_t>(sh[0] * sh[1]));
        std::vector<float> x(static_cast<std::size_t>(n * sh[1]));
        std::vector<float> y(static_cast<std::size_t>(n * sh[0]));
        for (auto& v : w) v = rng.uniform(-0.05f, 0.05f);
        for (auto& v : x) v = rng.uniform(-1.0f, 1.0f);
        double best = 1e30;
        for (int r = 0; r < 3; ++r) {
            const auto t0 = Clock::now();
            cpu::gemm_panel(x.data(), n, sh[1], w.data(), sh[0], y.data(), sh[0]);
            if (r > 0) best = std::min(best, seconds_since(t0));
        }
        flops += 2.0 * static_cast<double>(n * sh[0] * sh[1]);
        seconds += best;
    }
    cpu::blas_single_threaded();
    return flops / seconds / 1e9;
}

// Flops of one layer for a prompt of n tokens: the matmuls and causal attention (QKᵀ and PV).
double layer_prompt_flops(const Shape& s, std::int64_t n) {
    const double q = static_cast<double>(s.heads) * s.head_dim;
    const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
    const double params =
        2.0 * q * s.hidden + 2.0 * kv * s.hidden + 3.0 * s.intermediate * s.hidden;
    const double pairs = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
    return 2.0 * static_cast<double>(n) * params + 4.0 * pairs * q;
}

brigade::model::SequenceBatchEntry entry(std::uint64_t seq, std::vector<std::int32_t> toks,
                                         std::int32_t pos0) {
    brigade::model::SequenceBatchEntry e;
    e.seq_id = seq;
    e.n_tokens = static_cast<std::int32_t>(toks.size());
    e.tokens = std::move(toks);
    e.pos0 = pos0;
    return e;
}

// Fills positions [0, n) of every local layer's K and V of `seq` with random values, one
// thread per layer (gigabytes at 32k context). The first n * kv_dim elements of a block: rows,
// or for tiled f16 keys the first n / kKeyTile tiles (the contexts benched are whole tiles);
// random keys either way.
void fill_kv(brigade::model::KvCache& kv, std::uint64_t seq, int n_layers, std::int64_t kv_dim,
             std::int64_t n) {
    std::vector<std::thread> threads;
    for (int l = 0; l < n_layers; ++l) {
        threads.emplace_back([&, l] {
            FastRng rng;
            rng.s += static_cast<std::uint64_t>(l) * 7919;
            for (void* block : {kv.keys(seq, l), kv.values(seq, l)}) {
                if (kv.dtype() == brigade::model::DType::kF16) {
                    auto* p = static_cast<std::uint16_t*>(block);
                    for (std::int64_t i = 0; i < n * kv_dim; ++i) {
                        p[i] = brigade::model::cpu::f32_to_f16(rng.uniform(-1.0f, 1.0f));
                    }
                } else {
                    auto* p = static_cast<float*>(block);
                    for (std::int64_t i = 0; i < n * kv_dim; ++i) p[i] = rng.uniform(-1.0f, 1.0f);
                }
            }
        });
    }
    for (auto& t : threads) t.join();
}

// --ab: `warm_up` untimed calls of step(i), then `timed` timed ones, alternating A B B A
// between the backend's tuning (A) and `knob` applied to it (B), so that neither setting always
// runs right after the other. seconds[0] / seconds[1]: the time A's / B's steps took. The backend
// is left at A. False when a step failed.
template <class Step>
bool alternate_ab(brigade::model::cpu::CpuBackend& backend, const std::string& knob, int warm_up,
                  int timed, double (&seconds)[2], Step&& step) {
    const brigade::model::cpu::CpuTuning a = backend.tuning();
    const brigade::model::cpu::CpuTuning b = knob_applied(a, knob).value_or(a);
    seconds[0] = seconds[1] = 0.0;
    bool ok = true;
    for (int i = 0; ok && i < warm_up + timed; ++i) {
        const int v = (i % 4 == 1 || i % 4 == 2) ? 1 : 0;
        backend.set_tuning(v == 0 ? a : b);
        const auto t0 = Clock::now();
        ok = step(i);
        if (i >= warm_up) seconds[v] += seconds_since(t0);
    }
    backend.set_tuning(a);
    return ok;
}

bool run_case(const std::filesystem::path& dir, const Shape& shape, const std::string& format,
              BackendKind kind, int threads, const std::vector<int>& prompts,
              const std::vector<int>& contexts, int n_decode, EngineResult& r,
              const std::string& activations, bool profile, std::int64_t attention_min_keys,
              std::int64_t batched_min_tokens, const std::vector<int>& batches,
              const std::string& ab, brigade::model::DType kv_dtype, const std::string& isa) {
    using namespace brigade::model;
    r.model = shape.name;
    // Quantized activations apply to quantized weights only.
    r.format = activations != "default" && format != "bf16" ? format + "+" + activations : format;
    r.file_gb = static_cast<double>(std::filesystem::file_size(dir / "model.safetensors")) / 1e9;
    BackendOptions bo;
    bo.n_threads = threads;
    bo.cpu_int8_activations = activations == "int8";
    bo.cpu_int16_activations = activations == "int16";
    bo.cpu_split_int8_activations = activations != "f32";
    auto backend = make_backend(kind, bo);
    if (kind == BackendKind::kCpu &&
        (attention_min_keys > 0 || batched_min_tokens > 0 || isa != "native")) {
        cpu::CpuTuning tuning;  // as make_backend, with the options above changed
        tuning.int16_activations = bo.cpu_int16_activations;
        tuning.int8_activations = bo.cpu_int8_activations;
        tuning.split_int8_activations = bo.cpu_split_int8_activations;
        if (attention_min_keys > 0) tuning.min_keys_per_split = attention_min_keys;
        tuning.batched_min_tokens = batched_min_tokens;
        hold_kernels_to_isa(isa, tuning);  // also the Highway targets, before any kernel runs
        backend = cpu::make_cpu_backend(bo, tuning);
    }
    if (!backend) {
        std::fprintf(stderr, "backend: %s\n", backend.error().message.c_str());
        return false;
    }
    int max_prompt = 512;
    for (int p : prompts) max_prompt = std::max(max_prompt, p);
    int max_context = max_prompt;
    for (int c : contexts) max_context = std::max(max_context, c);
    auto t0 = Clock::now();
    StageOptions so;
    so.max_context = max_context + 2 * n_decode + 72;  // --ab decodes twice as many steps
    so.kv_dtype = kv_dtype;
    // --profile: every op goes through the timing decorator (a little slower; see op_profile).
    brigade::bench::OpProfile profiler(**backend);
    Backend& engine_backend = profile ? static_cast<Backend&>(profiler) : **backend;
    auto stage = Stage::load(dir, {0, shape.layers}, engine_backend, so);
    if (!stage) {
        std::fprintf(stderr, "load: %s\n", stage.error().message.c_str());
        return false;
    }
    r.load_s = seconds_since(t0);
    auto& s = **stage;
    r.weight_bytes = decode_bytes(s.weights());
    r.kv_bytes_per_pos = static_cast<double>(s.kv_cache().bytes_per_position());
    const int n_threads =
        threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const auto* cpu_backend = dynamic_cast<const cpu::CpuBackend*>(backend->get());
    auto dispatches = [&]() -> double {
        return cpu_backend != nullptr ? static_cast<double>(cpu_backend->n_dispatches()) : 0.0;
    };

    auto prompt_of = [&](int n, int salt) {
        std::vector<std::int32_t> p(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) {
            p[static_cast<std::size_t>(i)] = (i * 7919 + 13 + salt) % shape.vocab;
        }
        return p;
    };
    // Warm-up: fault in every weight page once (the first touch of an mmap reads the disk).
    t0 = Clock::now();
    (void)s.run_layers({entry(99, {1, 2, 3, 4}, 0)});
    r.first_s = seconds_since(t0);
    s.kv_cache().release(99);

    // Prompt processing, one chunk per prompt; the sgemm rate at that many tokens is the bound.
    const double rate512 = sgemm_rate_gflops(shape, 512, n_threads);
    for (int n : prompts) {
        const double rate = n == 512 ? rate512 : sgemm_rate_gflops(shape, n, n_threads);
        t0 = Clock::now();
        auto pp = s.run_layers({entry(1, prompt_of(n, 0), 0)});
        if (!pp) return false;
        const double secs = seconds_since(t0);
        s.kv_cache().release(1);
        r.prompts.push_back(n);
        r.pp_tps.push_back(n / secs);
        const double flops = shape.layers * layer_prompt_flops(shape, n);
        r.pp_bound_tps.push_back(rate > 0 ? n / (flops / (rate * 1e9)) : 0.0);
    }
    auto* cpu_tunable = dynamic_cast<cpu::CpuBackend*>(backend->get());
    if (!ab.empty() && cpu_tunable != nullptr) {
        // --ab on prompts: each prompt A B B A, tok/s from the sums (the cache's release of the
        // prompt counted with it).
        for (int n : prompts) {
            double ab_seconds[2];
            const bool ok = alternate_ab(*cpu_tunable, ab, 0, 4, ab_seconds, [&](int) {
                const bool done = s.run_layers({entry(1, prompt_of(n, 0), 0)}).has_value();
                s.kv_cache().release(1);
                return done;
            });
            if (!ok) return false;
            r.pp_ab_a_tps.push_back(2.0 * n / ab_seconds[0]);
            r.pp_ab_b_tps.push_back(2.0 * n / ab_seconds[1]);
        }
    }

    // One sequence after a 512-token prompt.
    const int prompt = 512;
    if (!s.run_layers({entry(1, prompt_of(prompt, 0), 0)})) return false;
    // Decode steps write into one reused StageOutput, as the server and `brigade run` do: the
    // value-returning run_layers allocates the logits row (600 KB for a 150k vocabulary, page
    // faults included) every step, which this loop measured as part of the engine before.
    StageOutput out;
    if (!s.run_layers({entry(1, {0}, prompt)}, {}, out)) return false;
    if (!s.kv_cache().truncate(1, prompt)) return false;
    profiler.reset();
    double d0 = dispatches();  // the timed steps' alone
    t0 = Clock::now();
    for (int step = 0; step < n_decode; ++step) {
        if (!s.run_layers({entry(1, {(step * 31) % shape.vocab}, prompt + step)}, {}, out)) {
            return false;
        }
    }
    const double t_tok = seconds_since(t0) / n_decode;
    const std::string case_name = r.model + " " + r.format;
    r.tg1_dispatches = (dispatches() - d0) / n_decode;
    if (profile) profiler.print((case_name + ", decode, 1 sequence").c_str(), t_tok, n_decode);
    r.tg1_tps = 1.0 / t_tok;
    r.tg1_context = prompt + n_decode / 2;
    s.kv_cache().release(1);

    if (!ab.empty() && cpu_tunable != nullptr) {
        if (!s.run_layers({entry(5, prompt_of(prompt, 1), 0)})) return false;
        // 8 untimed steps first: the first steps after a prompt are slower (the prompt's
        // buffers, the decode kernels' first touch), and would count against A alone.
        double seconds[2];
        const bool ok = alternate_ab(*cpu_tunable, ab, 8, 2 * n_decode, seconds, [&](int step) {
            auto done =
                s.run_layers({entry(5, {(step * 31) % shape.vocab}, prompt + step)}, {}, out);
            if (!done) {
                std::fprintf(stderr, "--ab step %d: %s\n", step, done.error().message.c_str());
            }
            return done.has_value();
        });
        if (!ok) return false;
        s.kv_cache().release(5);
        r.ab = ab;
        r.ab_a_tps = n_decode / seconds[0];
        r.ab_b_tps = n_decode / seconds[1];
    }

    // The whole decode loop of `brigade run` (model::generate): engine step plus sampling from
    // the vocabulary-wide logits, timed from the first generated token to the last. Greedy and
    // sampled loops alternate (kLoopRounds each, the order flipped every round): these machines
    // drift by 10-20% within a run, and single loops of each said little about the sampling's
    // share (bench/RESULTS.md, session 34).
    constexpr int kLoopRounds = 3;
    std::vector<double> loop_tps[2];  // [sampled]
    for (int round = 0; round < kLoopRounds; ++round) {
        for (const bool second : {false, true}) {
            const bool sampled = second != (round % 2 == 1);
            GenerateOptions go;
            go.max_new_tokens = n_decode + 1;
            if (sampled) {
                go.sampling.temperature = 0.7f;
                go.sampling.top_p = 0.9f;
                go.sampling.seed = 3 + static_cast<std::uint64_t>(round);
            }
            Clock::time_point first{};
            Clock::time_point last{};
            auto on_step = [&](const GenerationStep& st) {
                (st.index == 0 ? first : last) = Clock::now();
                return true;
            };
            const std::vector<std::int32_t> loop_prompt = prompt_of(16, 5);
            if (!generate(s, 77, loop_prompt, go, on_step)) return false;
            s.kv_cache().release(77);
            loop_tps[sampled ? 1 : 0].push_back(
                n_decode / std::chrono::duration<double>(last - first).count());
        }
    }
    r.loop_greedy_tps = median(loop_tps[0]);
    r.loop_sampled_tps = median(loop_tps[1]);
    std::vector<double> shares;
    for (int round = 0; round < kLoopRounds; ++round) {
        shares.push_back(loop_tps[1][static_cast<std::size_t>(round)] /
                         loop_tps[0][static_cast<std::size_t>(round)]);
    }
    r.loop_sampled_share = median(shares);

    // Batches of sequences with 16-token prompts, decoded together in one run_layers per step.
    // Multiply-adds per token: lm_head plus every layer matrix (one token's prompt flops
    // without its attention term, halved).
    double params = static_cast<double>(shape.vocab) * shape.hidden;
    params +=
        shape.layers * (layer_prompt_flops(shape, 1) - 4.0 * shape.heads * shape.head_dim) / 2.0;
    for (int b : batches) {
        const int short_prompt = 16;
        for (int i = 0; i < b; ++i) {
            auto p = prompt_of(short_prompt, i);
            if (!s.run_layers({entry(10 + static_cast<std::uint64_t>(i), p, 0)})) return false;
        }
        d0 = dispatches();
        profiler.reset();
        t0 = Clock::now();
        for (int step = 0; step < n_decode; ++step) {
            std::vector<SequenceBatchEntry> batch;
            for (int i = 0; i < b; ++i) {
                batch.push_back(entry(10 + static_cast<std::uint64_t>(i),
                                      {static_cast<std::int32_t>((step + i) % 100)},
                                      short_prompt + step));
            }
            if (!s.run_layers(batch, {}, out)) return false;
        }
        const double secs = seconds_since(t0) / n_decode;
        // Counted over the timed steps only (the --ab steps below would add theirs).
        const double step_dispatches = (dispatches() - d0) / n_decode;
        if (profile) {
            profiler.print((case_name + ", decode, " + std::to_string(b) + " sequences").c_str(),
                           secs, n_decode);
        }
        if (!ab.empty() && cpu_tunable != nullptr) {
            // As for one sequence: after 8 untimed steps, A B B A. (The batch is built inside
            // the timed step: a few entries, against a step of milliseconds.)
            double ab_seconds[2];
            const bool ok =
                alternate_ab(*cpu_tunable, ab, 8, 2 * n_decode, ab_seconds, [&](int step) {
                    std::vector<SequenceBatchEntry> batch;
                    for (int i = 0; i < b; ++i) {
                        batch.push_back(entry(10 + static_cast<std::uint64_t>(i),
                                              {static_cast<std::int32_t>((step + i) % 100)},
                                              short_prompt + n_decode + step));
                    }
                    return s.run_layers(batch, {}, out).has_value();
                });
            if (!ok) return false;
            r.tgb_ab_a_tps.push_back(b * n_decode / ab_seconds[0]);
            r.tgb_ab_b_tps.push_back(b * n_decode / ab_seconds[1]);
        }
        for (int i = 0; i < b; ++i) s.kv_cache().release(10 + static_cast<std::uint64_t>(i));
        r.batches.push_back(b);
        r.tgb_tps.push_back(b / secs);
        r.tgb_dispatches.push_back(step_dispatches);
        r.tgb_compute_s.push_back(rate512 > 0 ? b * 2.0 * params / (rate512 * 1e9) : 0.0);
    }

    // Long contexts: K/V of `ctx` positions filled directly, then n_decode tokens decoded.
    for (int ctx : contexts) {
        const std::uint64_t seq = 1000;
        const int n_ctx_decode = std::max(4, n_decode / 2);
        // (--ab decodes 4 + 2 * n_ctx_decode more steps.)
        if (!s.kv_cache().reserve(seq, ctx + 3 * n_ctx_decode + 4)) return false;
        fill_kv(s.kv_cache(), seq, shape.layers,
                static_cast<std::int64_t>(shape.kv_heads) * shape.head_dim, ctx);
        s.kv_cache().set_length(seq, ctx);
        t0 = Clock::now();
        for (int step = 0; step < n_ctx_decode; ++step) {
            if (!s.run_layers({entry(seq, {(step * 31) % shape.vocab}, ctx + step)}, {}, out)) {
                return false;
            }
        }
        const double secs = seconds_since(t0) / n_ctx_decode;
        if (!ab.empty() && cpu_tunable != nullptr) {
            // As for one sequence: after 4 untimed steps, A B B A over twice as many steps.
            double ab_seconds[2];
            const bool ok =
                alternate_ab(*cpu_tunable, ab, 4, 2 * n_ctx_decode, ab_seconds, [&](int step) {
                    const int pos = ctx + n_ctx_decode + step;
                    return s.run_layers({entry(seq, {(step * 31) % shape.vocab}, pos)}, {}, out)
                        .has_value();
                });
            if (!ok) return false;
            r.ctx_ab_a_tps.push_back(n_ctx_decode / ab_seconds[0]);
            r.ctx_ab_b_tps.push_back(n_ctx_decode / ab_seconds[1]);
        }
        s.kv_cache().release(seq);
        r.contexts.push_back(ctx);
        r.ctx_tps.push_back(1.0 / secs);
        r.ctx_kv_bytes.push_back((ctx + n_ctx_decode / 2.0) * r.kv_bytes_per_pos);
    }
    return true;
}

std::vector<int> int_list(const std::string& s) {
    std::vector<int> out;
    for (const auto& item : split_list(s)) out.push_back(std::stoi(item));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string models = "qwen2.5-0.5b,llama-3.2-1b", formats = "bf16,q8,q4", backend = "cpu";
    std::string dir_arg, json_path, prompts_arg = "512,4096", contexts_arg = "8192,32768";
    std::string batches_arg = "4,16";
    int threads = 0, n_decode = 32, layers = 0;
    bool keep = false, profile = false;
    std::string activations = "default";
    std::string ab;
    std::int64_t batched_min_tokens = 0;  // 0: the backend's default
    std::int64_t attention_min_keys = 0;  // 0: the backend's default (CpuTuning)
    bool kv_f32 = false;                  // --kv-f32: the KV cache in f32 (default f16)
    std::string isa = "native";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--models")
            models = next();
        else if (a == "--formats")
            formats = next();
        else if (a == "--threads")
            threads = std::stoi(next());
        else if (a == "--prompts")
            prompts_arg = next();
        else if (a == "--contexts")
            contexts_arg = next();
        else if (a == "--decode")
            n_decode = std::stoi(next());
        else if (a == "--layers")
            layers = std::stoi(next());
        else if (a == "--backend")
            backend = next();
        else if (a == "--dir")
            dir_arg = next();
        else if (a == "--json")
            json_path = next();
        else if (a == "--keep")
            keep = true;
        else if (a == "--int8-activations")
            activations = "int8";
        else if (a == "--activations") {
            activations = next();
            if (activations != "default" && activations != "f32" && activations != "int16" &&
                activations != "int8") {
                std::fprintf(stderr, "--activations: default, f32, int16 or int8\n");
                return 2;
            }
        } else if (a == "--profile")
            profile = true;
        else if (a == "--attention-min-keys")
            attention_min_keys = std::stoll(next());
        else if (a == "--batches")
            batches_arg = next();
        else if (a == "--batched-min-tokens")
            batched_min_tokens = std::stoll(next());
        else if (a == "--kv-f32")
            kv_f32 = true;
        else if (a == "--isa") {
            isa = next();
            if (const std::string why = isa_unavailable(isa); !why.empty()) {
                std::fprintf(stderr, "--isa %s: %s\n", isa.c_str(), why.c_str());
                return 2;
            }
        } else if (a == "--ab") {
            ab = next();
            if (!knob_applied(brigade::model::cpu::CpuTuning{}, ab)) {
                std::fprintf(stderr, "--ab: %s\n", ab_knob_list().c_str());
                return 2;
            }
        } else {
            std::fprintf(
                stderr,
                "usage: engine_bench [--models a,b] [--formats bf16,q8,q4] "
                "[--prompts 512,4096] [--contexts 8192,32768] [--decode N] "
                "[--threads N] [--layers N] [--backend cpu|reference] [--dir DIR] "
                "[--keep] [--json FILE] [--activations default|f32|int16|int8] [--profile] "
                "[--attention-min-keys N] [--batched-min-tokens N] [--batches 4,16] "
                "[--ab KNOB[=VALUE]] [--kv-f32] [--isa native|avx512|avx2-vnni|avx2]\n");
            return 2;
        }
    }
    const BackendKind kind = backend == "reference" ? BackendKind::kReference : BackendKind::kCpu;
    const int hw = brigade::model::cpu::usable_cpus();
    if (threads == 0 && kind == BackendKind::kCpu) {
        // The backend's own choice (default_thread_count), printed, and given to every case
        // and to the bounds' read loop.
        const auto& choice = brigade::model::cpu::default_thread_count();
        threads = choice.threads;
        std::printf("compute threads: %s\n", brigade::model::cpu::describe(choice, hw).c_str());
    }
    const int n_threads = threads > 0 ? threads : hw;
    const std::vector<int> prompts = int_list(prompts_arg);
    const std::vector<int> contexts = int_list(contexts_arg);
    const std::vector<int> batches = int_list(batches_arg);
    std::filesystem::path root = dir_arg.empty()
                                     ? std::filesystem::temp_directory_path() /
                                           ("brigade-engine-bench-" + std::to_string(::getpid()))
                                     : std::filesystem::path(dir_arg);

    const double bw1 = measure_bandwidth_gbs(1);
    // Measured again before every case; the bounds use the highest (see apply_bounds).
    std::vector<double> bw_runs = {measure_bandwidth_gbs(n_threads)};

    std::vector<EngineResult> results;
    for (const auto& m : split_list(models)) {
        Shape shape = m == kQwen05.name    ? kQwen05
                      : m == kLlama1b.name ? kLlama1b
                      : m == kLlama8b.name ? kLlama8b
                                           : Shape{};
        if (shape.name.empty()) {
            std::fprintf(stderr, "unknown model %s\n", m.c_str());
            return 2;
        }
        if (layers > 0) shape.layers = layers;
        for (const auto& f : split_list(formats)) {
            const int bits = f == "q8" ? 8 : f == "q4" ? 4 : 0;
            const auto dir =
                root / (shape.name + "-" + f + (layers > 0 ? "-l" + std::to_string(layers) : ""));
            if (!std::filesystem::exists(dir / "model.safetensors")) {
                const auto t0 = Clock::now();
                StreamingCheckpointWriter(shape, bits).write(dir);
                std::fprintf(stderr, "wrote %s in %.1fs\n", dir.c_str(), seconds_since(t0));
            }
            EngineResult r;
            bw_runs.push_back(measure_bandwidth_gbs(n_threads));
            if (!run_case(dir, shape, f, kind, threads, prompts, contexts, n_decode, r, activations,
                          profile, attention_min_keys, batched_min_tokens, batches, ab,
                          kv_f32 ? brigade::model::DType::kF32 : brigade::model::DType::kF16,
                          isa)) {
                return 1;
            }
            results.push_back(r);
            std::fprintf(stderr, "%s %s: tg1 %.2f tok/s\n", r.model.c_str(), r.format.c_str(),
                         r.tg1_tps);
            if (!keep && dir_arg.empty()) std::filesystem::remove_all(dir);
        }
    }
    const double bwn = *std::max_element(bw_runs.begin(), bw_runs.end());
    std::printf("memory read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads; highest of",
                bw1, bwn, n_threads);
    for (double b : bw_runs) std::printf(" %.1f", b);
    std::printf(", measured at the start and before each case)\n");
    for (EngineResult& r : results) apply_bounds(r, bwn * 1e9);
    print_tables(results, bwn);
    std::printf("\nbackend %s, %d threads, %d hardware threads, KV cache %s, isa %s\n",
                backend.c_str(), n_threads, hw, kv_f32 ? "f32" : "f16", isa.c_str());
    if (!json_path.empty()) {
        write_json(json_path, results, bw1, bw_runs, bwn, n_threads, kv_f32 ? "f32" : "f16", isa);
    }
    if (!keep && dir_arg.empty()) std::filesystem::remove_all(root);
    return 0;
}
