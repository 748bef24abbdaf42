// engine_bench: load time, prompt processing and decode speed of the engine on random
// checkpoints shaped like real models (issue 2 "Benchmark"), next to this machine's measured
// memory bandwidth and the decode ceiling it implies (weight bytes read per token / bandwidth).
//
//   engine_bench [--models qwen2.5-0.5b,llama-3.2-1b] [--formats bf16,q8,q4] [--prompt 512]
//                [--decode 32] [--threads 0] [--backend cpu] [--layers N] [--dir DIR] [--keep]
//
// Checkpoints are written once into DIR (default: a fresh temp dir, removed at exit unless
// --keep) as BF16 safetensors, or MLX affine 8-bit / 4-bit group 64 quantized with
// model/io/quantize (BF16 scales, as mlx_lm.convert stores them for a BF16 model).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/backend.hpp"
#include "model/forward.hpp"
#include "model/io/quantize.hpp"
#include "model/io/safetensors_writer.hpp"

namespace {

using brigade::model::BackendKind;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Shape {
    std::string name;
    int hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
    bool tie;
    std::string model_type;
    nlohmann::json rope_scaling;
    double rope_theta;
};

const Shape kQwen05 = {"qwen2.5-0.5b", 896,    24,   14,      2,       64,
                       4864,           151936, true, "qwen2", nullptr, 1e6};
const Shape kLlama1b = {"llama-3.2-1b",
                        2048,
                        16,
                        32,
                        8,
                        64,
                        8192,
                        128256,
                        true,
                        "llama",
                        {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}},
                        5e5};

// One tensor of the file: header entry plus a generator of its bytes.
struct Planned {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t bytes = 0;
};

// Writes a checkpoint tensor by tensor without holding the whole file in memory.
class StreamingCheckpointWriter {
public:
    StreamingCheckpointWriter(const Shape& s, int bits) : s_(s), bits_(bits) {}

    void write(const std::filesystem::path& dir) {
        std::filesystem::create_directories(dir);
        nlohmann::json config = {{"model_type", s_.model_type},
                                 {"hidden_size", s_.hidden},
                                 {"num_hidden_layers", s_.layers},
                                 {"num_attention_heads", s_.heads},
                                 {"num_key_value_heads", s_.kv_heads},
                                 {"head_dim", s_.head_dim},
                                 {"intermediate_size", s_.intermediate},
                                 {"vocab_size", s_.vocab},
                                 {"rms_norm_eps", 1e-6},
                                 {"rope_theta", s_.rope_theta},
                                 {"rope_scaling", s_.rope_scaling},
                                 {"max_position_embeddings", 32768},
                                 {"tie_word_embeddings", s_.tie}};
        if (bits_ != 0) {
            config["quantization"] = {{"bits", bits_}, {"group_size", 64}, {"mode", "affine"}};
            config["quantization_config"] = config["quantization"];
        }
        std::ofstream(dir / "config.json") << config.dump(2);

        plan();
        nlohmann::ordered_json header = nlohmann::ordered_json::object();
        std::uint64_t offset = 0;
        for (const auto& t : planned_) {
            header[t.name] = {{"dtype", t.dtype},
                              {"shape", t.shape},
                              {"data_offsets", {offset, offset + t.bytes}}};
            offset += t.bytes;
        }
        std::string text = header.dump();
        while (text.size() % 8 != 0) text.push_back(' ');
        std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
        std::uint64_t n = text.size();
        char len[8];
        for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
        out.write(len, 8);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        emit(out);
    }

private:
    void add(const std::string& name, const std::string& dtype, std::vector<std::int64_t> shape,
             std::uint64_t bytes) {
        planned_.push_back({name, dtype, std::move(shape), bytes});
    }
    void add_matrix(const std::string& path, std::int64_t rows, std::int64_t cols) {
        if (bits_ == 0) {
            add(path + ".weight", "BF16", {rows, cols},
                static_cast<std::uint64_t>(rows * cols * 2));
            return;
        }
        const std::int64_t groups = cols / 64;
        add(path + ".weight", "U32", {rows, cols * bits_ / 32},
            static_cast<std::uint64_t>(rows * cols * bits_ / 8));
        add(path + ".scales", "BF16", {rows, groups},
            static_cast<std::uint64_t>(rows * groups * 2));
        add(path + ".biases", "BF16", {rows, groups},
            static_cast<std::uint64_t>(rows * groups * 2));
    }
    void plan() {
        const std::int64_t q = static_cast<std::int64_t>(s_.heads) * s_.head_dim;
        const std::int64_t kv = static_cast<std::int64_t>(s_.kv_heads) * s_.head_dim;
        add_matrix("model.embed_tokens", s_.vocab, s_.hidden);
        for (int l = 0; l < s_.layers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            add(p + "input_layernorm.weight", "BF16", {s_.hidden}, 2ull * s_.hidden);
            add(p + "post_attention_layernorm.weight", "BF16", {s_.hidden}, 2ull * s_.hidden);
            add_matrix(p + "self_attn.q_proj", q, s_.hidden);
            add_matrix(p + "self_attn.k_proj", kv, s_.hidden);
            add_matrix(p + "self_attn.v_proj", kv, s_.hidden);
            add_matrix(p + "self_attn.o_proj", s_.hidden, q);
            if (s_.model_type == "qwen2") {
                add(p + "self_attn.q_proj.bias", "BF16", {q}, 2ull * q);
                add(p + "self_attn.k_proj.bias", "BF16", {kv}, 2ull * kv);
                add(p + "self_attn.v_proj.bias", "BF16", {kv}, 2ull * kv);
            }
            add_matrix(p + "mlp.gate_proj", s_.intermediate, s_.hidden);
            add_matrix(p + "mlp.up_proj", s_.intermediate, s_.hidden);
            add_matrix(p + "mlp.down_proj", s_.hidden, s_.intermediate);
        }
        add("model.norm.weight", "BF16", {s_.hidden}, 2ull * s_.hidden);
        if (!s_.tie) add_matrix("lm_head", s_.vocab, s_.hidden);
    }

    // Data in planned order. A quantized matrix is produced in row blocks: its packed words
    // stream out, its scales and biases are kept until the words are written.
    void emit(std::ofstream& out) {
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
        std::string scales, biases;
        auto ends_with = [](const std::string& s, const std::string& tail) {
            return s.size() >= tail.size() &&
                   s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
        };
        for (const auto& t : planned_) {
            if (ends_with(t.name, ".scales") || ends_with(t.name, ".biases")) {
                const std::string& src = ends_with(t.name, ".scales") ? scales : biases;
                out.write(src.data(), static_cast<std::streamsize>(src.size()));
                continue;
            }
            if (t.dtype == "U32") {
                const std::int64_t rows = t.shape[0];
                const std::int64_t cols = t.shape[1] * 32 / bits_;
                scales.clear();
                biases.clear();
                const std::int64_t block = 1024;
                std::vector<float> w;
                for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
                    const std::int64_t n = std::min(block, rows - r0);
                    w.resize(static_cast<std::size_t>(n * cols));
                    for (auto& x : w) x = dist(rng);
                    auto qz =
                        brigade::model::io::quantize_affine(w.data(), n, cols, bits_, 64, "BF16");
                    out.write(qz->weight.data(), static_cast<std::streamsize>(qz->weight.size()));
                    scales += qz->scales;
                    biases += qz->biases;
                }
                continue;
            }
            const bool is_norm = t.name.find("norm") != std::string::npos;
            std::vector<float> v(t.bytes / 2);
            for (auto& x : v) x = is_norm ? 1.0f : dist(rng);
            std::string bytes;
            brigade::model::io::append_float_bytes(bytes, "BF16", v.data(), v.size());
            out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        }
    }

    Shape s_;
    int bits_;
    std::vector<Planned> planned_;
};

// Read bandwidth: every thread sums its slice of a 1 GiB buffer; best of 5 passes.
double measure_bandwidth_gbs(int n_threads) {
    const std::size_t n = (1ull << 30) / sizeof(std::uint64_t);
    std::vector<std::uint64_t> buf(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = i;
    double best = 0.0;
    std::atomic<std::uint64_t> sink{0};
    for (int pass = 0; pass < 5; ++pass) {
        const auto t0 = Clock::now();
        std::vector<std::thread> threads;
        for (int t = 0; t < n_threads; ++t) {
            threads.emplace_back([&, t] {
                const std::size_t begin = n * t / n_threads, end = n * (t + 1) / n_threads;
                std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (std::size_t i = begin; i + 4 <= end; i += 4) {
                    s0 += buf[i];
                    s1 += buf[i + 1];
                    s2 += buf[i + 2];
                    s3 += buf[i + 3];
                }
                sink += s0 + s1 + s2 + s3;
            });
        }
        for (auto& th : threads) th.join();
        best = std::max(best,
                        static_cast<double>(n * sizeof(std::uint64_t)) / seconds_since(t0) / 1e9);
    }
    return sink.load() == 42 ? 0.0 : best;
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

struct Result {
    std::string model, format;
    double file_gb = 0, load_s = 0, first_s = 0, pp_tps = 0, tg1_tps = 0, tg4_tps = 0,
           bytes_per_token = 0;
};

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

bool run_case(const std::filesystem::path& dir, const Shape& shape, const std::string& format,
              BackendKind kind, int threads, int n_prompt, int n_decode, Result& r) {
    using namespace brigade::model;
    r.model = shape.name;
    r.format = format;
    r.file_gb = static_cast<double>(std::filesystem::file_size(dir / "model.safetensors")) / 1e9;
    BackendOptions bo;
    bo.n_threads = threads;
    auto backend = make_backend(kind, bo);
    if (!backend) {
        std::fprintf(stderr, "backend: %s\n", backend.error().message.c_str());
        return false;
    }
    auto t0 = Clock::now();
    StageOptions so;
    so.max_context = n_prompt + n_decode + 64;
    auto stage = Stage::load(dir, {0, shape.layers}, **backend, so);
    if (!stage) {
        std::fprintf(stderr, "load: %s\n", stage.error().message.c_str());
        return false;
    }
    r.load_s = seconds_since(t0);
    auto& s = **stage;
    r.bytes_per_token = decode_bytes(s.weights());

    std::vector<std::int32_t> prompt(static_cast<std::size_t>(n_prompt));
    for (int i = 0; i < n_prompt; ++i)
        prompt[static_cast<std::size_t>(i)] = (i * 7919 + 13) % shape.vocab;
    auto entry = [](std::uint64_t seq, std::vector<std::int32_t> toks, std::int32_t pos0) {
        SequenceBatchEntry e;
        e.seq_id = seq;
        e.n_tokens = static_cast<std::int32_t>(toks.size());
        e.tokens = std::move(toks);
        e.pos0 = pos0;
        return e;
    };
    // Warm-up: fault in every weight page once (the first touch of an mmap reads the disk).
    t0 = Clock::now();
    (void)s.run_layers({entry(99, {1, 2, 3, 4}, 0)});
    r.first_s = seconds_since(t0);
    s.kv_cache().release(99);

    t0 = Clock::now();
    auto pp = s.run_layers({entry(1, prompt, 0)});
    if (!pp) return false;
    r.pp_tps = n_prompt / seconds_since(t0);

    t0 = Clock::now();
    for (int step = 0; step < n_decode; ++step) {
        auto o = s.run_layers({entry(1, {(step * 31) % shape.vocab}, n_prompt + step)});
        if (!o) return false;
    }
    r.tg1_tps = n_decode / seconds_since(t0);

    // Four sequences with short prompts, decoded together in one batch per step.
    const int short_prompt = 16;
    for (std::uint64_t seq = 10; seq < 14; ++seq) {
        std::vector<std::int32_t> p(prompt.begin(), prompt.begin() + short_prompt);
        p[0] = static_cast<std::int32_t>(seq);
        if (!s.run_layers({entry(seq, p, 0)})) return false;
    }
    t0 = Clock::now();
    for (int step = 0; step < n_decode; ++step) {
        std::vector<SequenceBatchEntry> batch;
        for (std::uint64_t seq = 10; seq < 14; ++seq) {
            batch.push_back(
                entry(seq, {static_cast<std::int32_t>((step + seq) % 100)}, short_prompt + step));
        }
        if (!s.run_layers(batch)) return false;
    }
    r.tg4_tps = 4.0 * n_decode / seconds_since(t0);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    std::string models = "qwen2.5-0.5b,llama-3.2-1b", formats = "bf16,q8,q4", backend = "cpu";
    std::string dir_arg;
    int threads = 0, n_prompt = 512, n_decode = 32, layers = 0;
    bool keep = false;
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
        else if (a == "--prompt")
            n_prompt = std::stoi(next());
        else if (a == "--decode")
            n_decode = std::stoi(next());
        else if (a == "--layers")
            layers = std::stoi(next());
        else if (a == "--backend")
            backend = next();
        else if (a == "--dir")
            dir_arg = next();
        else if (a == "--keep")
            keep = true;
        else {
            std::fprintf(stderr,
                         "usage: engine_bench [--models a,b] [--formats bf16,q8,q4] "
                         "[--prompt N] [--decode N] [--threads N] [--layers N] "
                         "[--backend cpu|reference] [--dir DIR] [--keep]\n");
            return 2;
        }
    }
    const BackendKind kind = backend == "reference" ? BackendKind::kReference : BackendKind::kCpu;
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int n_threads = threads > 0 ? threads : hw;
    std::filesystem::path root = dir_arg.empty()
                                     ? std::filesystem::temp_directory_path() /
                                           ("brigade-engine-bench-" + std::to_string(::getpid()))
                                     : std::filesystem::path(dir_arg);

    const double bw1 = measure_bandwidth_gbs(1);
    const double bwn = measure_bandwidth_gbs(n_threads);
    std::printf("memory read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n", bw1, bwn,
                n_threads);

    std::vector<Result> results;
    for (const auto& m : split_list(models)) {
        Shape shape = m == kQwen05.name ? kQwen05 : m == kLlama1b.name ? kLlama1b : Shape{};
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
            Result r;
            if (!run_case(dir, shape, f, kind, threads, n_prompt, n_decode, r)) return 1;
            results.push_back(r);
            std::fprintf(stderr, "%s %s: pp %.1f tok/s, tg1 %.2f tok/s, tg4 %.2f tok/s\n",
                         r.model.c_str(), r.format.c_str(), r.pp_tps, r.tg1_tps, r.tg4_tps);
        }
    }
    std::printf(
        "\n| model | format | file GB | load s | pp%d tok/s | tg tok/s (1 seq) | tg tok/s "
        "(4 seq) | weight MB/token | ceiling tok/s (%.0f GB/s) | tg1 / ceiling |\n",
        n_prompt, bwn);
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        const double ceiling = bwn * 1e9 / r.bytes_per_token;
        std::printf(
            "| %s | %s | %.2f | %.3f | %.2f | %.1f | %.2f | %.2f | %.0f | %.1f | %.0f%% |\n",
            r.model.c_str(), r.format.c_str(), r.file_gb, r.load_s, r.first_s, r.pp_tps, r.tg1_tps,
            r.tg4_tps, r.bytes_per_token / 1e6, ceiling, 100.0 * r.tg1_tps / ceiling);
    }
    std::printf("\nbackend %s, %d threads, %d hardware threads\n", backend.c_str(), n_threads, hw);
    if (!keep && dir_arg.empty()) std::filesystem::remove_all(root);
    return 0;
}
