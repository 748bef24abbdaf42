#pragma once
// Random checkpoints shaped like real models for engine_bench (issues 2 and 8): the shapes of
// Qwen2.5-0.5B and Llama-3.2-1B (and Llama-3.1-8B on request), written tensor by tensor as BF16
// safetensors or as MLX affine 8-/4-bit group-64 copies (model/io/quantize, BF16 scales), without
// holding the file in memory.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/fast_rng.hpp"
#include "model/io/quantize.hpp"
#include "model/io/safetensors_writer.hpp"

namespace brigade::bench {

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

// Not in the default set (its BF16 file is 16 GB): the shape most home labs run, for what the
// per-op costs of the small shapes above come to on big matrices.
const Shape kLlama8b = {"llama-3.1-8b",
                        4096,
                        32,
                        32,
                        8,
                        128,
                        14336,
                        128256,
                        false,
                        "llama",
                        {{"rope_type", "llama3"},
                         {"factor", 8.0},
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
                                 {"max_position_embeddings", 65536},
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
        // Written under a temporary name and renamed when complete: a run killed mid-write
        // (a time limit) must not leave a truncated file that the next run takes as done.
        const auto partial = dir / "model.safetensors.partial";
        {
            std::ofstream out(partial, std::ios::binary | std::ios::trunc);
            std::uint64_t n = text.size();
            char len[8];
            for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
            out.write(len, 8);
            out.write(text.data(), static_cast<std::streamsize>(text.size()));
            emit(out);
        }
        std::filesystem::rename(partial, dir / "model.safetensors");
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
        FastRng rng;
        auto dist = [](FastRng& g) { return g.uniform(-0.05f, 0.05f); };
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
                // Blocks of rows are generated and quantized on all cores (one wave of
                // blocks at a time, each with its own seed) and written in order.
                const std::int64_t block = 256;
                const std::int64_t n_blocks = (rows + block - 1) / block;
                const auto wave =
                    static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
                for (std::int64_t b0 = 0; b0 < n_blocks; b0 += wave) {
                    const std::int64_t b1 = std::min(n_blocks, b0 + wave);
                    std::vector<brigade::model::io::AffineQuantized> done(
                        static_cast<std::size_t>(b1 - b0));
                    std::vector<std::thread> threads;
                    for (std::int64_t b = b0; b < b1; ++b) {
                        threads.emplace_back([&, b] {
                            const std::int64_t r0 = b * block;
                            const std::int64_t n = std::min(block, rows - r0);
                            FastRng local;
                            local.s += static_cast<std::uint64_t>(b + 1) * 0x9E37ull +
                                       static_cast<std::uint64_t>(rows);
                            std::vector<float> w(static_cast<std::size_t>(n * cols));
                            for (auto& x : w) x = dist(local);
                            done[static_cast<std::size_t>(b - b0)] =
                                *brigade::model::io::quantize_affine(w.data(), n, cols, bits_, 64,
                                                                     "BF16");
                        });
                    }
                    for (auto& th : threads) th.join();
                    for (const auto& qz : done) {
                        out.write(qz.weight.data(), static_cast<std::streamsize>(qz.weight.size()));
                        scales += qz.scales;
                        biases += qz.biases;
                    }
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

}  // namespace brigade::bench
