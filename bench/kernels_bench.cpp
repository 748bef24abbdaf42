// Kernel benchmark of the CPU backend (issue 8): how close matmul and attention come to the
// machine's limits, measured side by side in one run.
//
//   memory read bandwidth   multi-threaded streaming read of 1 GiB, best of passes with and
//                           without software prefetch                         -> GB/s
//   f32 FMA peak            independent vector multiply-adds on every thread -> GFLOP/s
//   fork-join               one empty parallel region of the thread pool       -> µs
//                           (and one whose tasks each read a vector of 896 or 4864 floats
//                           that one thread, or every thread, has just written)
//   decode matmul (n = 1)   weight bytes read per second, vs that bandwidth   -> GB/s, ratio
//                           (quantized: what serving uses, split-int8 activations for 4-bit
//                           with AVX2 or Arm sdot, else the grouped f32 kernel; the
//                           grouped f32 kernel (" [f32]"), split-int8 in each instruction set
//                           this CPU runs (" [split ...]"), the plain
//                           fused kernel, the opt-in int16-activation kernel and the opt-in
//                           int8-activation kernel in each instruction set this CPU runs,
//                           side by side)
//   batched decode n=4..16  time vs the larger of bytes/bandwidth and the same call from cache
//                           (the kernel's compute ceiling), speed-up over n=1, and GFLOP/s as
//                           a share of the FMA peak
//   prefill (512, 4096)     GFLOP/s, vs OpenBLAS sgemm on f32 weights of the same shape
//   decode attention        KV bytes read per second at 4k, 8k and 32k context, vs bandwidth
//                           (f32 keys and values; " [f16]": the KV cache's default, f16
//                           with keys in tiles; " [f16 key rows]": f16 with keys in rows)
//
// Shapes are those of Qwen2.5-0.5B (hidden 896, intermediate 4864, vocab 151936) and
// Llama-3.2-1B (hidden 2048, intermediate 8192). Decode cycles through enough copies of each
// matrix to exceed the last-level cache, so it measures DRAM, not L3.
//
// Usage: kernels_bench [--threads N] [--quick] [--filter TEXT] [--json FILE] [--hot]
//                      [--prefetch BYTES] [--avx2]
// (--hot: decode from one cache-resident matrix, i.e. the kernels' compute ceiling; --avx2:
// Highway kernels at their AVX2 target, split-int8 at AVX-VNNI and no AMX, to stand in for a
// client CPU without AVX-512: engine_bench's --isa avx2-vnni)
// Every case cycles through enough copies of its data (1.5 GB) to exceed the last-level cache.

// clang-format off
// First, so that HWY_TARGETS here is the kernels' set of targets.
#include "model/cpu/simd_targets.hpp"
#include <hwy/targets.h>
// clang-format on

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/cpu_tuning_choice.hpp"
#include "bench/fast_rng.hpp"
#include "bench/fma_peak.hpp"
#include "bench/read_bandwidth.hpp"
#include "model/backend.hpp"
#include "model/cpu/blas_gemm.hpp"
#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/thread_pool.hpp"
#include "model/cpu/weight_decode.hpp"

namespace {

using brigade::model::AttentionArgs;
using brigade::model::BackendOptions;
using brigade::model::DType;
using brigade::model::key_element_index;
using brigade::model::KeyLayout;
using brigade::model::kKeyTile;
using brigade::model::WeightMatrix;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

using Rng = brigade::bench::FastRng;

struct Result {
    std::string name;
    double value = 0;
    std::string unit;
    double bound = 0;  // 0 = no bound to compare with
    std::string bound_what;
};

// Owns the bytes of one weight matrix with random contents.
struct OwnedMatrix {
    std::vector<std::uint8_t> data, scales, biases;
    WeightMatrix view;
};

struct Format {
    std::string name;
    DType dtype;
    int bits;
};

std::uint16_t random_bf16(Rng& rng, int max_exp) {
    const std::uint64_t r = rng.next();
    const auto sign = static_cast<std::uint16_t>((r & 1u) << 15);
    const auto exp = static_cast<std::uint16_t>(max_exp - static_cast<int>((r >> 1) % 6));
    const auto mant = static_cast<std::uint16_t>((r >> 8) & 0x7F);
    return static_cast<std::uint16_t>(sign | (exp << 7) | mant);
}

OwnedMatrix make_matrix(const Format& f, std::int64_t rows, std::int64_t cols, Rng& rng) {
    OwnedMatrix m;
    m.view.rows = rows;
    m.view.cols = cols;
    if (f.bits == 0) {
        m.view.dtype = f.dtype;
        const std::size_t elem = f.dtype == DType::kF32 ? 4 : 2;
        m.data.resize(static_cast<std::size_t>(rows * cols) * elem);
        if (f.dtype == DType::kF32) {
            for (std::size_t i = 0; i < m.data.size(); i += 4) {
                const float v =
                    static_cast<float>(static_cast<std::int64_t>(rng.next() % 2001) - 1000) * 1e-3f;
                std::memcpy(m.data.data() + i, &v, 4);
            }
        } else {
            for (std::size_t i = 0; i < m.data.size(); i += 2) {
                const std::uint16_t h = random_bf16(rng, 126);
                std::memcpy(m.data.data() + i, &h, 2);
            }
        }
    } else {
        constexpr int kGroup = 64;
        m.view.dtype = DType::kU32;
        m.view.bits = f.bits;
        m.view.group_size = kGroup;
        m.view.scale_dtype = DType::kBF16;
        m.data.resize(static_cast<std::size_t>(rows * cols * f.bits / 8));
        for (std::size_t i = 0; i + 8 <= m.data.size(); i += 8) {
            const std::uint64_t r = rng.next();
            std::memcpy(m.data.data() + i, &r, 8);
        }
        const std::size_t n_groups = static_cast<std::size_t>(rows * cols / kGroup);
        m.scales.resize(n_groups * 2);
        m.biases.resize(n_groups * 2);
        for (std::size_t g = 0; g < n_groups; ++g) {
            const std::uint16_t s = random_bf16(rng, 120);
            const std::uint16_t b = random_bf16(rng, 123);
            std::memcpy(m.scales.data() + 2 * g, &s, 2);
            std::memcpy(m.biases.data() + 2 * g, &b, 2);
        }
        m.view.scales = m.scales.data();
        m.view.biases = m.biases.data();
    }
    m.view.data = m.data.data();
    return m;
}

std::vector<float> random_activations(std::size_t n, Rng& rng) {
    std::vector<float> v(n);
    for (auto& x : v)
        x = static_cast<float>(static_cast<std::int64_t>(rng.next() % 2001) - 1000) * 1e-3f;
    return v;
}

struct Shape {
    std::string model, what;
    std::int64_t rows, cols;
};

struct Options {
    int threads = 0;
    bool quick = false;
    std::string filter;
    std::string json_path;
    bool hot = false;  // decode from one cache-resident copy: the kernels' compute ceiling
    std::int64_t prefetch_bytes = -1;  // CpuTuning::prefetch_bytes; -1: its default
    // Stand in for an AVX2 + AVX-VNNI machine (Alder Lake and later client cores) on an
    // AVX-512 one: Highway kernels at their AVX2 target, split-int8 at AVX-VNNI.
    bool avx2 = false;
};

bool wanted(const Options& o, const std::string& name) {
    return o.filter.empty() || name.find(o.filter) != std::string::npos;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(colon + 2);
        }
    }
    return "unknown";
}

std::string json_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

}  // namespace

// How many copies of `bytes` to cycle through so a round touches at least `min_bytes`.
// min_bytes is several times the last-level cache (300 MB on the Xeon of bench/RESULTS.md),
// so every round streams from DRAM.
int copies_for(double bytes, double min_bytes) {
    return static_cast<int>(std::clamp(std::ceil(min_bytes / bytes), 1.0, 100000.0));
}

// Copies of one matrix at distinct addresses (equal contents: caches work by address),
// enough of them to touch at least `min_bytes` per round.
std::vector<OwnedMatrix> make_copies(const Format& f, std::int64_t rows, std::int64_t cols,
                                     double min_bytes, bool hot, Rng& rng) {
    std::vector<OwnedMatrix> copies;
    copies.push_back(make_matrix(f, rows, cols, rng));
    const double bytes = static_cast<double>(copies[0].view.total_bytes());
    const int n_copies = hot ? 1 : copies_for(bytes, min_bytes);
    copies.reserve(static_cast<std::size_t>(n_copies));
    while (static_cast<int>(copies.size()) < n_copies) {
        OwnedMatrix c;
        c.data = copies[0].data;
        c.scales = copies[0].scales;
        c.biases = copies[0].biases;
        c.view = copies[0].view;
        c.view.data = c.data.data();
        if (!c.scales.empty()) {
            c.view.scales = c.scales.data();
            c.view.biases = c.biases.data();
        }
        copies.push_back(std::move(c));
    }
    return copies;
}

// Best seconds per matmul of `rounds` rounds over all copies (after one warm-up round).
double time_matmul(brigade::model::Backend& backend, const std::vector<OwnedMatrix>& copies,
                   const float* x, std::int64_t n, float* y, int rounds, int calls_per_round) {
    for (const auto& c : copies) backend.matmul(c.view, x, n, y);
    double best = 1e30;
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = Clock::now();
        for (int i = 0; i < calls_per_round; ++i) {
            for (const auto& c : copies) backend.matmul(c.view, x, n, y);
        }
        best = std::min(best,
                        seconds_since(t0) / static_cast<double>(copies.size() * calls_per_round));
    }
    return best;
}

int main(int argc, char** argv) {
    Options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) {
            opt.threads = std::atoi(argv[++i]);
        } else if (a == "--quick") {
            opt.quick = true;
        } else if (a == "--filter" && i + 1 < argc) {
            opt.filter = argv[++i];
        } else if (a == "--hot") {
            opt.hot = true;
        } else if (a == "--avx2") {
            opt.avx2 = true;
        } else if (a == "--json" && i + 1 < argc) {
            opt.json_path = argv[++i];
        } else if (a == "--prefetch" && i + 1 < argc) {
            opt.prefetch_bytes = std::atoll(argv[++i]);
        } else {
            std::fprintf(stderr,
                         "usage: kernels_bench [--threads N] [--quick] [--filter TEXT] "
                         "[--json FILE] [--hot] [--prefetch BYTES] [--avx2]\n");
            return 2;
        }
    }

    using brigade::model::cpu::CpuBackend;
    using brigade::model::cpu::CpuTuning;
    // Kernel variants of quantized decode. "serving" is what make_backend gives: split-int8
    // activations (4-bit) where the CPU has AVX2 or Arm sdot, else "grouped", the f32
    // kernels (labelled " [f32]"), from which the other variants below are derived.
    CpuTuning serving;
    serving.int16_activations = false;
    if (opt.avx2) {
        if (const std::string why = brigade::bench::isa_unavailable("avx2-vnni"); !why.empty()) {
            std::fprintf(stderr, "--avx2: %s\n", why.c_str());
            return 2;
        }
        brigade::bench::hold_kernels_to_isa("avx2-vnni", serving);
    }
    if (opt.prefetch_bytes >= 0) serving.prefetch_bytes = opt.prefetch_bytes;
    CpuTuning grouped = serving;
    grouped.split_int8_activations = false;
    CpuTuning fused = grouped;
    fused.grouped_quant = false;
    CpuTuning int16 = grouped;
    int16.int16_activations = true;
    CpuBackend backend(BackendOptions{opt.threads}, serving);
    CpuBackend grouped_backend(BackendOptions{opt.threads}, grouped);
    CpuBackend fused_backend(BackendOptions{opt.threads}, fused);
    CpuBackend int16_backend(BackendOptions{opt.threads}, int16);
    // Serving without AMX tiles (where the CPU has them, serving decodes 2-31 tokens through
    // them), labelled " [no amx]".
    CpuTuning no_amx = serving;
    no_amx.amx = false;
    CpuBackend no_amx_backend(BackendOptions{opt.threads}, no_amx);
    // The opt-in int8-activation path, once per instruction set this CPU runs (not scalar),
    // best last; labelled " [int8 <variant>]".
    std::vector<std::pair<std::unique_ptr<CpuBackend>, std::string>> int8_backends;
    for (auto variant : brigade::model::cpu::int8_variants_available()) {
        if (variant == brigade::model::cpu::Int8Variant::kScalar) continue;
        CpuTuning int8 = grouped;
        int8.int8_activations = true;
        int8.int8_variant = variant;
        int8_backends.emplace_back(
            std::make_unique<CpuBackend>(BackendOptions{opt.threads}, int8),
            std::string(" [int8 ") + brigade::model::cpu::int8_variant_name(variant) + "]");
    }
    // The split-int8 path in each instruction set this CPU runs (4-bit), labelled
    // " [split <variant>]".
    std::vector<std::pair<std::unique_ptr<CpuBackend>, std::string>> split_int8_backends;
    for (auto variant : brigade::model::cpu::split_int8_variants_available()) {
        CpuTuning split = serving;
        split.split_int8_variant = variant;
        split_int8_backends.emplace_back(
            std::make_unique<CpuBackend>(BackendOptions{opt.threads}, split),
            std::string(" [split ") + brigade::model::cpu::split_int8_variant_name(variant) + "]");
    }
    // Software prefetch distance of the decode kernels: none and 1 KiB beside the default.
    CpuTuning no_prefetch = grouped;
    no_prefetch.prefetch_bytes = 0;
    CpuBackend no_prefetch_backend(BackendOptions{opt.threads}, no_prefetch);
    CpuTuning far_prefetch = grouped;
    far_prefetch.prefetch_bytes = 1024;
    CpuBackend far_prefetch_backend(BackendOptions{opt.threads}, far_prefetch);
    CpuTuning no_lookup = grouped;  // 4-bit through the generic grouped path on AVX-512 too
    no_lookup.q4_lookup = false;
    CpuBackend no_lookup_backend(BackendOptions{opt.threads}, no_lookup);
    CpuTuning one_row = grouped;  // the grouped kernels one row at a time
    one_row.grouped_multi_row = false;
    CpuBackend one_row_backend(BackendOptions{opt.threads}, one_row);
    // Batches of 8+ tokens through each kernel, whichever the target's default is (without AMX,
    // 8 tokens of 4- and 8-bit weights take the grouped kernels, CpuTuning::grouped_max_tokens,
    // and BF16/F16 rows their tiles, CpuTuning::plain_tiles_max_tokens).
    CpuTuning dot_tiles = grouped;  // columns along the vector
    dot_tiles.batched_min_tokens = 1000;
    dot_tiles.grouped_max_tokens = 4;
    dot_tiles.plain_tiles_max_tokens = 4;
    CpuBackend dot_tiles_backend(BackendOptions{opt.threads}, dot_tiles);
    CpuTuning token_vectors = grouped;  // tokens along the vector
    token_vectors.batched_min_tokens = 5;
    token_vectors.grouped_max_tokens = 4;
    token_vectors.plain_tiles_max_tokens = 4;
    CpuBackend token_vectors_backend(BackendOptions{opt.threads}, token_vectors);
    const int n_threads = backend.compute_threads();
    // The target the kernels dispatch to: the best one both supported here and compiled in.
    const std::int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
    const std::int64_t best_target = usable & ~(usable - 1);
    std::printf("CPU: %s | threads: %d | Highway target: %s | BLAS: %s\n", cpu_model().c_str(),
                n_threads, hwy::TargetName(best_target),
                brigade::model::cpu::have_blas() ? "yes" : "no");

    std::vector<Result> results;
    auto report = [&](const Result& r) {
        results.push_back(r);
        if (r.bound > 0) {
            std::printf("%-56s %9.2f %-7s | %-22s %9.2f | ratio %5.1f%%\n", r.name.c_str(), r.value,
                        r.unit.c_str(), r.bound_what.c_str(), r.bound, 100.0 * r.value / r.bound);
        } else {
            std::printf("%-56s %9.2f %-7s\n", r.name.c_str(), r.value, r.unit.c_str());
        }
        std::fflush(stdout);
    };

    brigade::model::cpu::ThreadPool bw_pool(n_threads);
    const std::size_t bw_bytes = (opt.quick ? 256ull : 1024ull) << 20;
    const double bandwidth =
        brigade::bench::measure_read_bandwidth_gbs(bw_pool, bw_bytes, opt.quick ? 4 : 8);
    report({"memory read bandwidth", bandwidth, "GB/s", 0, ""});
    // The compute side of "compute-bound": batched decode is compared with this below.
    const double fma_peak = brigade::bench::measure_fma_peak_gflops(bw_pool, opt.quick ? 3 : 6);
    report({"f32 FMA peak, all threads", fma_peak, "GFLOP/s", 0, ""});

    // What one parallel region costs with no work in it: the fork-join a decode step pays per
    // op (a hundred or more per token), one task per thread and four per thread.
    for (const int per_thread : {1, 4}) {
        const std::string name =
            per_thread == 1 ? "fork-join, 1 task per thread" : "fork-join, 4 tasks per thread";
        if (!wanted(opt, name)) continue;
        const int calls = opt.quick ? 20000 : 100000;
        std::vector<std::int64_t> sink(static_cast<std::size_t>(n_threads) * 16);
        double best = 1e9;
        for (int round = 0; round < 3; ++round) {
            const auto t0 = Clock::now();
            for (int c = 0; c < calls; ++c) {
                bw_pool.parallel_for(std::int64_t{n_threads} * per_thread,
                                     [&](std::int64_t task, int thread) {
                                         sink[static_cast<std::size_t>(thread) * 16] += task;
                                     });
            }
            best = std::min(best, seconds_since(t0) / calls);
        }
        report({name, best * 1e6, "µs", 0, ""});
    }

    // What a region costs when every task first reads a vector another thread just wrote: a
    // decode matmul's activations (Qwen2.5-0.5B's 896 and 4864), written by one thread (the
    // quantizer) or by all of them (the previous op's rows).
    for (const std::int64_t floats : {std::int64_t{896}, std::int64_t{4864}}) {
        for (const bool by_all : {false, true}) {
            const std::string name = "fork-join reading " + std::to_string(floats) +
                                     " floats written by " + (by_all ? "all threads" : "one");
            if (!wanted(opt, name)) continue;
            const int calls = opt.quick ? 20000 : 100000;
            std::vector<float> v(static_cast<std::size_t>(floats));
            std::vector<float> sink(static_cast<std::size_t>(n_threads) * 16);
            double best = 1e9;
            for (int round = 0; round < 3; ++round) {
                const auto t0 = Clock::now();
                for (int c = 0; c < calls; ++c) {
                    if (by_all) {
                        bw_pool.parallel_for(n_threads, [&](std::int64_t task, int) {
                            const std::int64_t b = floats * task / n_threads;
                            const std::int64_t e = floats * (task + 1) / n_threads;
                            for (std::int64_t i = b; i < e; ++i) {
                                v[static_cast<std::size_t>(i)] = static_cast<float>(c + i);
                            }
                        });
                    } else {
                        for (std::int64_t i = 0; i < floats; ++i) {
                            v[static_cast<std::size_t>(i)] = static_cast<float>(c + i);
                        }
                    }
                    bw_pool.parallel_for(n_threads, [&](std::int64_t, int thread) {
                        // Bits, not a float sum: a loop the compiler vectorizes, so the
                        // time is the reads'.
                        std::uint32_t acc = 0;
                        for (const float f : v) acc ^= std::bit_cast<std::uint32_t>(f);
                        sink[static_cast<std::size_t>(thread) * 16] += static_cast<float>(acc);
                    });
                }
                best = std::min(best, seconds_since(t0) / calls);
            }
            report({name, best * 1e6, "µs", 0, ""});
        }
    }

    const std::vector<Format> formats = {
        {"bf16", DType::kBF16, 0}, {"q8g64", DType::kU32, 8}, {"q4g64", DType::kU32, 4}};
    const std::vector<Shape> decode_shapes = {
        {"qwen0.5b", "q/o 896x896", 896, 896},     {"qwen0.5b", "gate/up 4864x896", 4864, 896},
        {"qwen0.5b", "down 896x4864", 896, 4864},  {"qwen0.5b", "lm_head 151936x896", 151936, 896},
        {"llama1b", "q/o 2048x2048", 2048, 2048},  {"llama1b", "gate/up 8192x2048", 8192, 2048},
        {"llama1b", "down 2048x8192", 2048, 8192},
    };
    Rng rng;
    const double min_bytes = opt.quick ? 512e6 : 1.5e9;
    const int rounds = opt.quick ? 3 : 6;
    for (const auto& s : decode_shapes) {
        for (const auto& f : formats) {
            const std::string name = "decode " + s.model + " " + s.what + " " + f.name;
            if (!wanted(opt, name)) continue;
            const auto copies = make_copies(f, s.rows, s.cols, min_bytes, opt.hot, rng);
            const double bytes = static_cast<double>(copies[0].view.total_bytes());
            const auto x = random_activations(static_cast<std::size_t>(s.cols), rng);
            std::vector<float> y(static_cast<std::size_t>(s.rows));
            const int calls = opt.hot ? 50 : 1;
            const double t = time_matmul(backend, copies, x.data(), 1, y.data(), rounds, calls);
            report({name, bytes / t / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
            for (auto [b, label] : {std::pair{&no_prefetch_backend, " [no prefetch]"},
                                    std::pair{&far_prefetch_backend, " [prefetch 1 KiB]"}}) {
                const double tp = time_matmul(*b, copies, x.data(), 1, y.data(), rounds, calls);
                report({name + label, bytes / tp / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
            }
            if (f.bits == 0) continue;
            const double t_f32 =
                time_matmul(grouped_backend, copies, x.data(), 1, y.data(), rounds, calls);
            report(
                {name + " [f32]", bytes / t_f32 / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
            const double t_one =
                time_matmul(one_row_backend, copies, x.data(), 1, y.data(), rounds, calls);
            report(
                {name + " [1 row]", bytes / t_one / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
            if (f.bits == 4) {
                for (auto& [b, label] : split_int8_backends) {
                    const double ts = time_matmul(*b, copies, x.data(), 1, y.data(), rounds, calls);
                    report(
                        {name + label, bytes / ts / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
                }
                const double tl =
                    time_matmul(no_lookup_backend, copies, x.data(), 1, y.data(), rounds, calls);
                report({name + " [no lookup]", bytes / tl / 1e9, "GB/s", bandwidth,
                        "read bandwidth GB/s"});
            }
            const double t_fused =
                time_matmul(fused_backend, copies, x.data(), 1, y.data(), rounds, calls);
            report({name + " [fused]", bytes / t_fused / 1e9, "GB/s", bandwidth,
                    "read bandwidth GB/s"});
            const double t_int16 =
                time_matmul(int16_backend, copies, x.data(), 1, y.data(), rounds, calls);
            report({name + " [int16]", bytes / t_int16 / 1e9, "GB/s", bandwidth,
                    "read bandwidth GB/s"});
            for (auto& [b, label] : int8_backends) {
                const double t8 = time_matmul(*b, copies, x.data(), 1, y.data(), rounds, calls);
                report({name + label, bytes / t8 / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
            }
        }
    }

    // Prefill: the bound is OpenBLAS sgemm on f32 weights of the same shape with all threads.
    const std::vector<Shape> prefill_shapes = {
        {"qwen0.5b", "gate/up 4864x896", 4864, 896},  {"qwen0.5b", "down 896x4864", 896, 4864},
        {"qwen0.5b", "k/v 128x896", 128, 896},        {"llama1b", "q/o 2048x2048", 2048, 2048},
        {"llama1b", "gate/up 8192x2048", 8192, 2048},
    };
    for (std::int64_t n_prefill : {std::int64_t{512}, std::int64_t{4096}}) {
        for (std::size_t si = 0; si < prefill_shapes.size(); ++si) {
            const auto& s = prefill_shapes[si];
            const std::string prefix =
                "prefill" + std::to_string(n_prefill) + " " + s.model + " " + s.what;
            if (!wanted(opt, prefix)) continue;
            const double flops = 2.0 * static_cast<double>(n_prefill * s.rows * s.cols);
            const auto x = random_activations(static_cast<std::size_t>(n_prefill * s.cols), rng);
            std::vector<float> y(static_cast<std::size_t>(n_prefill * s.rows));
            const int reps = opt.quick || n_prefill > 512 ? 2 : 4;
            double sgemm_gflops = 0;
            if (brigade::model::cpu::have_blas()) {
                const auto w32 = make_matrix({"f32", DType::kF32, 0}, s.rows, s.cols, rng);
                brigade::model::cpu::blas_set_threads(n_threads);
                double best = 1e30;
                for (int r = 0; r <= reps; ++r) {
                    const auto t0 = Clock::now();
                    brigade::model::cpu::gemm_panel(x.data(), n_prefill, s.cols,
                                                    static_cast<const float*>(w32.view.data),
                                                    s.rows, y.data(), s.rows);
                    if (r > 0) best = std::min(best, seconds_since(t0));
                }
                brigade::model::cpu::blas_single_threaded();
                sgemm_gflops = flops / best / 1e9;
                report({prefix + " openblas-sgemm-f32", sgemm_gflops, "GFLOP/s", 0, ""});
            }
            for (const auto& f : formats) {
                const auto w = make_matrix(f, s.rows, s.cols, rng);
                double best = 1e30;
                for (int r = 0; r <= reps; ++r) {
                    const auto t0 = Clock::now();
                    backend.matmul(w.view, x.data(), n_prefill, y.data());
                    if (r > 0) best = std::min(best, seconds_since(t0));
                }
                report({prefix + " " + f.name, flops / best / 1e9, "GFLOP/s", sgemm_gflops,
                        "sgemm GFLOP/s"});
            }
        }
    }

    // Batched decode: n sequences share one pass over the weights, so aggregate tokens/s
    // should grow ~n times while bandwidth-bound. The bound is the slower of streaming the
    // weights at the measured bandwidth and the kernel's own compute ceiling (the same call on
    // one cache-resident copy, "hot"); the ratio then says how close to whichever binds.
    // "[panels]" is the dequantize + sgemm path that larger prompts take.
    CpuTuning panels = grouped;
    panels.gemm_min_tokens = 1;
    CpuBackend panel_backend(BackendOptions{opt.threads}, panels);
    // The rows are decode steps, as a stage says of a batch of one-token sequences: the AMX
    // tiles and the non-AMX split-int8 pass take them as the engine does (two digits).
    for (CpuBackend* b : {&backend, &no_amx_backend, &dot_tiles_backend, &token_vectors_backend,
                          &panel_backend, &one_row_backend}) {
        b->set_rows_are_decode_steps(true);
    }
    for (auto& [b, label] : int8_backends) b->set_rows_are_decode_steps(true);
    for (std::size_t si : {std::size_t{0}, std::size_t{1}, std::size_t{4}}) {
        const Shape& s = prefill_shapes[si];
        for (const auto& f : formats) {
            const std::string base = s.model + " " + s.what + " " + f.name;
            if (!wanted(opt, "decode x1 " + base) && !wanted(opt, "decode x4 " + base)) continue;
            const auto copies = make_copies(f, s.rows, s.cols, min_bytes, false, rng);
            const std::vector<OwnedMatrix> hot(copies.begin(), copies.begin() + 1);
            const double bytes = static_cast<double>(copies[0].view.total_bytes());
            double t1 = 0;
            for (std::int64_t n : {std::int64_t{1}, std::int64_t{4}, std::int64_t{8},
                                   std::int64_t{16}, std::int64_t{24}}) {
                const auto x = random_activations(static_cast<std::size_t>(n * s.cols), rng);
                std::vector<float> y(static_cast<std::size_t>(n * s.rows));
                auto one = [&](CpuBackend& b, const std::string& label) {
                    const double t = time_matmul(b, copies, x.data(), n, y.data(), rounds, 1);
                    const double t_hot = time_matmul(b, hot, x.data(), n, y.data(), rounds, 20);
                    if (n == 1 && label.empty()) t1 = t;
                    const double t_bound = std::max(bytes / (bandwidth * 1e9), t_hot);
                    const double nd = static_cast<double>(n);
                    report({"decode x" + std::to_string(n) + " " + base + label, nd / t, "tok/s",
                            nd / t_bound, "bound tok/s"});
                    const double gflops = 2.0 * nd * static_cast<double>(s.rows * s.cols) / t / 1e9;
                    std::printf(
                        "%56s speed-up over x1 %.2f (ideal %.0f), %s-bound, %.0f GFLOP/s (%.0f%% "
                        "of FMA peak)\n",
                        "", t1 * nd / t, nd,
                        t_hot > bytes / (bandwidth * 1e9) ? "compute" : "bandwidth", gflops,
                        100.0 * gflops / fma_peak);
                };
                one(backend, "");
                if (n >= 2 && f.bits != 0 && brigade::model::cpu::amx_available()) {
                    one(no_amx_backend, " [no amx]");
                }
                if (n >= 8) {
                    one(dot_tiles_backend, " [dot tiles]");
                    one(token_vectors_backend, " [token vectors]");
                }
                if (n >= 16) one(panel_backend, " [panels]");
                if (n == 1 && f.bits != 0) one(one_row_backend, " [1 row]");
                if (n <= 4 && f.bits != 0) {
                    for (auto& [b, label] : int8_backends) one(*b, label);
                }
            }
        }
    }

    // Decode attention: one query against a long KV cache (f32; f16 as the cache keeps it, keys
    // in tiles; f16 with keys in rows), cycling through copies.
    struct AttnShape {
        std::string model;
        std::int64_t n_heads, n_kv_heads, head_dim;
    };
    // Short contexts are bound by fixed costs (the fork-join, the merge of key splits), so
    // they also run with smaller minimum splits beside the default, and report µs per call.
    std::vector<std::pair<std::unique_ptr<CpuBackend>, std::string>> split_backends;
    for (const std::int64_t min_keys : {256, 32}) {
        CpuTuning t = grouped;
        t.min_keys_per_split = min_keys;
        split_backends.emplace_back(std::make_unique<CpuBackend>(BackendOptions{opt.threads}, t),
                                    " [min keys " + std::to_string(min_keys) + "]");
    }
    CpuTuning all_heads = grouped;
    all_heads.attention_fewer_heads_per_tile = false;
    CpuBackend all_heads_backend(BackendOptions{opt.threads}, all_heads);
    for (const auto& a : {AttnShape{"qwen0.5b", 14, 2, 64}, AttnShape{"llama1b", 32, 8, 64}}) {
        for (std::int64_t n_kv :
             {std::int64_t{512}, std::int64_t{4096}, std::int64_t{8192}, std::int64_t{32768}}) {
            const std::string name = "attention decode " + a.model + " ctx " + std::to_string(n_kv);
            if (!wanted(opt, name)) continue;
            const auto kv_elems = static_cast<std::size_t>(n_kv * a.n_kv_heads * a.head_dim);
            const double bytes = 2.0 * static_cast<double>(kv_elems) * 4.0;
            const int n_copies = opt.hot ? 1 : copies_for(bytes, min_bytes);
            std::vector<std::vector<float>> ks, vs;
            ks.push_back(random_activations(kv_elems, rng));
            vs.push_back(random_activations(kv_elems, rng));
            for (int i = 1; i < n_copies; ++i) {
                ks.push_back(ks[0]);
                vs.push_back(vs[0]);
            }
            const auto q =
                random_activations(static_cast<std::size_t>(a.n_heads * a.head_dim), rng);
            std::vector<float> out(q.size());
            AttentionArgs args;
            args.q = q.data();
            args.out = out.data();
            args.n_q = 1;
            args.n_kv = n_kv;
            args.n_heads = a.n_heads;
            args.n_kv_heads = a.n_kv_heads;
            args.head_dim = a.head_dim;
            args.q_pos0 = n_kv - 1;
            args.scale = 0.125f;
            // Each variant has its own thread pool, whose workers spin for ~100 µs after a
            // job: a variant timed right after another competed with the other's spinning
            // workers (measured: the first variant of each case 2-4x slower, whichever it
            // was). So every variant first runs alone for a few milliseconds, and with one
            // cache-resident copy (--hot) a round is many calls, not one.
            // `k_of(i)` / `v_of(i)`: copy i of the keys and values in the format being timed.
            auto time_attention_of = [&](CpuBackend& b, auto k_of, auto v_of, int copies) {
                args.k = k_of(0);
                args.v = v_of(0);
                const auto warm_until = Clock::now() + std::chrono::milliseconds(5);
                while (Clock::now() < warm_until) b.attention(args);
                const int calls_per_copy = copies == 1 ? 20 : 1;
                double best = 1e30;
                for (int r = 0; r < (opt.quick ? 3 : 8); ++r) {
                    const auto t0 = Clock::now();
                    for (int i = 0; i < copies; ++i) {
                        args.k = k_of(i);
                        args.v = v_of(i);
                        for (int c = 0; c < calls_per_copy; ++c) b.attention(args);
                    }
                    if (r > 0) best = std::min(best, seconds_since(t0) / (copies * calls_per_copy));
                }
                return best;
            };
            auto time_attention = [&](CpuBackend& b) {
                args.kv_dtype = DType::kF32;
                return time_attention_of(
                    b, [&](int i) { return ks[static_cast<std::size_t>(i)].data(); },
                    [&](int i) { return vs[static_cast<std::size_t>(i)].data(); }, n_copies);
            };
            const double best = time_attention(backend);
            report({name, bytes / best / 1e9, "GB/s", bandwidth, "read bandwidth GB/s"});
            {
                // The KV cache's default format: f16, half the bytes (as many copies again),
                // keys in tiles (KeyLayout::kTiles); and f16 keys in rows beside it.
                std::vector<std::vector<std::uint16_t>> k16, kt16, v16;
                const int n16 = opt.hot ? 1 : copies_for(bytes / 2, min_bytes);
                const std::int64_t kv_dim = a.n_kv_heads * a.head_dim;
                const auto tiled_elems =
                    static_cast<std::size_t>((n_kv + kKeyTile - 1) / kKeyTile * kKeyTile * kv_dim);
                for (int i = 0; i < n16; ++i) {
                    k16.emplace_back(kv_elems);
                    kt16.emplace_back(tiled_elems);
                    v16.emplace_back(kv_elems);
                    for (std::int64_t p = 0; p < n_kv; ++p) {
                        for (std::int64_t e = 0; e < kv_dim; ++e) {
                            const auto at = static_cast<std::size_t>(p * kv_dim + e);
                            const std::uint16_t h = brigade::model::cpu::f32_to_f16(ks[0][at]);
                            k16.back()[at] = h;
                            kt16.back()[static_cast<std::size_t>(
                                key_element_index(KeyLayout::kTiles, p, e, kv_dim))] = h;
                            v16.back()[at] = brigade::model::cpu::f32_to_f16(vs[0][at]);
                        }
                    }
                }
                args.kv_dtype = DType::kF16;
                auto time_f16 = [&](const std::vector<std::vector<std::uint16_t>>& keys,
                                    KeyLayout layout, CpuBackend& b) {
                    args.k_layout = layout;
                    const double t = time_attention_of(
                        b, [&](int i) { return keys[static_cast<std::size_t>(i)].data(); },
                        [&](int i) { return v16[static_cast<std::size_t>(i)].data(); }, n16);
                    args.k_layout = KeyLayout::kRows;
                    return t;
                };
                const double t16 = time_f16(kt16, KeyLayout::kTiles, backend);
                const double t16_rows = time_f16(k16, KeyLayout::kRows, backend);
                // Short contexts: decode tiles of every KV head (the plan before session 22).
                const double t16_all =
                    n_kv <= 4096 ? time_f16(kt16, KeyLayout::kTiles, all_heads_backend) : 0.0;
                args.kv_dtype = DType::kF32;
                report({name + " [f16]", bytes / 2 / t16 / 1e9, "GB/s", bandwidth,
                        "read bandwidth GB/s"});
                report({name + " [f16] time / f32 time", t16 / best, "x", 0, ""});
                report({name + " [f16 key rows]", bytes / 2 / t16_rows / 1e9, "GB/s", bandwidth,
                        "read bandwidth GB/s"});
                report({name + " [f16] time / [f16 key rows] time", t16 / t16_rows, "x", 0, ""});
                if (t16_all > 0.0) {
                    report({name + " [f16] per call", t16 * 1e6, "µs", 0, ""});
                    report({name + " [f16, every head per tile] per call", t16_all * 1e6, "µs", 0,
                            ""});
                }
            }
            if (n_kv > 4096) continue;
            report({name + " per call", best * 1e6, "µs", 0, ""});
            for (auto& [b, label] : split_backends) {
                report({name + label + " per call", time_attention(*b) * 1e6, "µs", 0, ""});
            }
        }
    }

    if (!opt.json_path.empty()) {
        std::ofstream out(opt.json_path);
        out << "{\n  \"cpu\": \"" << json_escape(cpu_model()) << "\",\n  \"threads\": " << n_threads
            << ",\n  \"highway_target\": \"" << hwy::TargetName(best_target)
            << "\",\n  \"results\": [\n";
        for (std::size_t i = 0; i < results.size(); ++i) {
            const auto& r = results[i];
            out << "    {\"name\": \"" << json_escape(r.name) << "\", \"value\": " << r.value
                << ", \"unit\": \"" << r.unit << "\", \"bound\": " << r.bound
                << ", \"bound_what\": \"" << json_escape(r.bound_what)
                << "\", \"ratio\": " << (r.bound > 0 ? r.value / r.bound : 0.0) << "}"
                << (i + 1 < results.size() ? ",\n" : "\n");
        }
        out << "  ]\n}\n";
    }
    return 0;
}
