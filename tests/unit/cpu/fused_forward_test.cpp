// A whole forward pass with the CPU backend's fused layer ops against the same backend with
// them turned off (a wrapper that keeps the Backend defaults: separate matmuls, silu_mul, add):
// the logits must be identical, bit for bit, through prompt processing, one-token decode,
// short chunks and batches of two and three sequences, on tiny random checkpoints of every format
// (odd intermediate sizes, Qwen2 biases, Qwen3 q/k norms) and on the bundled demo model.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "model/cpu/cpu_backend.hpp"
#include "model/forward.hpp"
#include "model/forwarding_backend.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/model/tiny_model.hpp"

namespace brigade::model::cpu {
namespace {

// Forwards every op to `inner` but keeps Backend's default fused ops, which call the plain ops.
class UnfusedBackend final : public ForwardingBackend {
public:
    using ForwardingBackend::ForwardingBackend;
    std::string_view name() const override { return "unfused"; }
    void matmul_many(std::span<const MatmulJob> jobs, const float* x, std::int64_t n) override {
        Backend::matmul_many(jobs, x, n);
    }
    void gated_mlp_up(const WeightMatrix& gate, const WeightVector* b_gate, const WeightMatrix& up,
                      const WeightVector* b_up, const float* x, std::int64_t n, float* out,
                      float* up_scratch) override {
        Backend::gated_mlp_up(gate, b_gate, up, b_up, x, n, out, up_scratch);
    }
    void matmul_add(const WeightMatrix& w, const float* a, std::int64_t n, const WeightVector* bias,
                    float* residual, float* scratch) override {
        Backend::matmul_add(w, a, n, bias, residual, scratch);
    }
    void attention_many(std::span<const AttentionArgs> batch) override {
        Backend::attention_many(batch);
    }
};

SequenceBatchEntry entry(std::uint64_t seq, std::vector<std::int32_t> tokens, std::int32_t pos0) {
    SequenceBatchEntry e;
    e.seq_id = seq;
    e.n_tokens = static_cast<std::int32_t>(tokens.size());
    e.tokens = std::move(tokens);
    e.pos0 = pos0;
    return e;
}

std::int32_t argmax(std::span<const float> row) {
    return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Runs the same steps on a stage over the fused CPU backend and one over the unfused wrapper
// and expects identical logits at every step.
void expect_fused_equals_unfused(const std::filesystem::path& dir, const std::string& what) {
    for (int threads : {2, 3}) {
        BackendOptions options;
        options.n_threads = threads;
        auto fused_backend = make_backend(BackendKind::kCpu, options).value();
        auto plain_backend = make_backend(BackendKind::kCpu, options).value();
        UnfusedBackend unfused(*plain_backend);
        auto config = load_model_config(dir);
        ASSERT_TRUE(config) << what << ": " << config.error().message;
        auto fused = Stage::load(dir, {0, config->n_layers}, *fused_backend);
        ASSERT_TRUE(fused) << what << ": " << fused.error().message;
        auto plain = Stage::load(dir, (*fused)->range(), unfused);
        ASSERT_TRUE(plain) << plain.error().message;
        const std::int32_t vocab = (*fused)->config().vocab_size;

        const std::string who = what + ", " + std::to_string(threads) + " threads";
        auto step = [&](const std::vector<SequenceBatchEntry>& batch, const std::string& label) {
            auto a = (*fused)->run_layers(batch);
            auto b = (*plain)->run_layers(batch);
            EXPECT_TRUE(a && b) << who << " " << label;
            if (!a || !b) return StageOutput{};
            EXPECT_EQ(a->logits.size(), b->logits.size());
            EXPECT_EQ(0, std::memcmp(a->logits.data(), b->logits.data(),
                                     a->logits.size() * sizeof(float)))
                << who << ": logits differ at " << label;
            return std::move(*a);
        };

        // A prompt of 40 tokens (prompt processing), then one-token decode steps (greedy).
        std::vector<std::int32_t> prompt;
        for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 5) % vocab);
        auto out = step({entry(1, prompt, 0)}, "prompt");
        std::int32_t pos = 40;
        for (int i = 0; i < 6 && !out.logits.empty(); ++i, ++pos) {
            const std::int32_t next = argmax(out.row(0));
            out = step({entry(1, {next}, pos)}, "decode step " + std::to_string(i));
        }
        // A chunk of 3 tokens (n = 3 decode kernels), and one of 7 (batched row tiles).
        out = step({entry(1, {3 % vocab, 9 % vocab, 27 % vocab}, pos)}, "3-token chunk");
        pos += 3;
        std::vector<std::int32_t> seven;
        for (int i = 0; i < 7; ++i) seven.push_back((i * 11 + 2) % vocab);
        out = step({entry(1, seven, pos)}, "7-token chunk");
        pos += 7;
        // Two sequences in one step (the batched K/V path).
        (void)step({entry(2, {1, 2, 3, 4, 5}, 0)}, "second prompt");
        (void)step({entry(1, {7 % vocab}, pos), entry(2, {8 % vocab}, 5)}, "two-sequence step");
        // Three (AMX tiles where the CPU has them, with a batch of decode steps' digits).
        (void)step({entry(3, {4, 5, 6}, 0)}, "third prompt");
        (void)step(
            {entry(1, {9 % vocab}, pos + 1), entry(2, {10 % vocab}, 6), entry(3, {11 % vocab}, 3)},
            "three-sequence step");
    }
}

class FusedForward : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() /
               ("brigade_fused_forward_" + std::to_string(::getpid()));
        std::filesystem::remove_all(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    std::filesystem::path dir_;
};

TEST_F(FusedForward, TinyModelsOfEveryFormatGiveIdenticalLogits) {
    struct Case {
        std::string what;
        test::TinyModelSpec spec;
    };
    std::vector<Case> cases;
    auto add = [&](const std::string& what, auto tweak) {
        test::TinyModelSpec s;
        s.hidden = 64;
        s.heads = 4;
        s.kv_heads = 2;
        s.head_dim = 16;
        s.vocab = 96;
        tweak(s);
        cases.push_back({what, s});
    };
    add("llama f32, intermediate 101", [](test::TinyModelSpec& s) {
        s.intermediate = 101;
        s.dtype = "F32";
    });
    add("qwen2 bf16 (biases), intermediate 77", [](test::TinyModelSpec& s) {
        s.model_type = "qwen2";
        s.intermediate = 77;
        s.dtype = "BF16";
    });
    add("qwen3 f16 (q/k norms)", [](test::TinyModelSpec& s) {
        s.model_type = "qwen3";
        s.intermediate = 96;
        s.dtype = "F16";
    });
    add("llama q8 g32", [](test::TinyModelSpec& s) {
        s.intermediate = 160;
        s.dtype = "BF16";
        s.bits = 8;
        s.group_size = 32;
    });
    add("qwen2 q4 g32", [](test::TinyModelSpec& s) {
        s.model_type = "qwen2";
        s.intermediate = 96;
        s.dtype = "BF16";
        s.bits = 4;
        s.group_size = 32;
    });
    add("llama q4 g64", [](test::TinyModelSpec& s) {
        s.intermediate = 192;
        s.dtype = "BF16";
        s.bits = 4;
        s.group_size = 64;
    });
    for (const auto& c : cases) {
        const auto dir = dir_ / std::to_string(&c - cases.data());
        test::write_tiny_model(dir, c.spec);
        expect_fused_equals_unfused(dir, c.what);
    }
}

TEST_F(FusedForward, DemoModelGivesIdenticalLogits) {
    const auto demo = brigade::test::source_dir() / "model" / "demo";
    if (!std::filesystem::exists(demo / "model.safetensors")) {
        GTEST_SKIP() << "no demo model at " << demo;
    }
    expect_fused_equals_unfused(demo, "demo BF16");
    expect_fused_equals_unfused(demo / "mlx-q8", "demo MLX q8");
    expect_fused_equals_unfused(demo / "mlx-q4", "demo MLX q4");
}

}  // namespace
}  // namespace brigade::model::cpu
