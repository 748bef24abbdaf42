// The bundled demo model (model/demo, issue 4) through the engine, against what PyTorch computed
// at training time (model/demo/reference.json): shape and parameter count, greedy continuations
// of the three fixed prompts token for token for the BF16, MLX 8-bit and MLX 4-bit copies on
// both CPU backends; and `compute_perplexity` itself (window arithmetic checked against
// hand-listed windows scored directly through `Stage`, the stride variant, bad arguments).
//
// Held-out perplexity needs the tokenizer, which this binary does not link; it is checked by
// tests/integration/cli/perplexity_cli_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "model/backend.hpp"
#include "model/forward.hpp"
#include "model/generate.hpp"
#include "model/io/safetensors.hpp"
#include "model/model_config.hpp"
#include "model/perplexity.hpp"
#include "model/sampling.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model {
namespace {

std::filesystem::path demo_dir() { return test::source_dir() / "model" / "demo"; }

const nlohmann::json& reference() {
    static const nlohmann::json j = [] {
        std::ifstream in(demo_dir() / "reference.json");
        return nlohmann::json::parse(in);
    }();
    return j;
}

// The three copies of the demo model: key in reference.json, directory.
struct DemoCopy {
    const char* key;
    const char* subdir;
};
constexpr DemoCopy kCopies[] = {{"bf16", ""}, {"mlx_q8", "mlx-q8"}, {"mlx_q4", "mlx-q4"}};

std::filesystem::path copy_dir(const DemoCopy& c) {
    return *c.subdir == '\0' ? demo_dir() : demo_dir() / c.subdir;
}

std::unique_ptr<Backend> backend_or_null(BackendKind kind) {
    auto b = make_backend(kind);
    return b ? std::move(*b) : nullptr;
}

std::unique_ptr<Stage> load_whole(const std::filesystem::path& dir, Backend& backend,
                                  int n_layers = 4) {
    auto s = Stage::load(dir, {0, n_layers}, backend);
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::move(*s) : nullptr;
}

TEST(DemoModel, ConfigAndParameterCountMatchTheReference) {
    const auto& want = reference()["model"];
    auto config = load_model_config(demo_dir());
    ASSERT_TRUE(config) << config.error().message;
    EXPECT_EQ(config->family, ModelFamily::kLlama);
    EXPECT_EQ(config->hidden_size, want["hidden_size"].get<int>());
    EXPECT_EQ(config->n_layers, want["num_hidden_layers"].get<int>());
    EXPECT_EQ(config->n_heads, want["num_attention_heads"].get<int>());
    EXPECT_EQ(config->n_kv_heads, want["num_key_value_heads"].get<int>());
    EXPECT_EQ(config->head_dim, want["head_dim"].get<int>());
    EXPECT_EQ(config->intermediate_size, want["intermediate_size"].get<int>());
    EXPECT_EQ(config->vocab_size, want["vocab_size"].get<int>());
    EXPECT_EQ(config->max_position_embeddings, want["max_position_embeddings"].get<int>());
    EXPECT_TRUE(config->tie_word_embeddings);
    EXPECT_FALSE(config->quantization.has_value());
    ASSERT_EQ(config->eos_token_ids.size(), 1u);
    EXPECT_EQ(config->eos_token_ids[0], want["eos_token_id"].get<int>());

    auto checkpoint = io::Checkpoint::open(demo_dir());
    ASSERT_TRUE(checkpoint) << checkpoint.error().message;
    std::int64_t n_params = 0;
    for (const auto& name : checkpoint->tensor_names()) {
        auto t = checkpoint->tensor(name);
        ASSERT_TRUE(t) << t.error().message;
        EXPECT_EQ((*t)->dtype_name, "BF16") << name;
        n_params += (*t)->n_elements();
    }
    EXPECT_EQ(n_params, want["parameters"].get<std::int64_t>());

    for (const auto& copy : {kCopies[1], kCopies[2]}) {
        auto q = load_model_config(copy_dir(copy));
        ASSERT_TRUE(q) << q.error().message;
        ASSERT_TRUE(q->quantization.has_value()) << copy.key;
        EXPECT_EQ(q->quantization->global.group_size, 64);
        EXPECT_EQ(q->quantization->global.bits, copy.key == std::string("mlx_q8") ? 8 : 4);
    }
}

// ---- Greedy continuations -------------------------------------------------------------------

using GreedyParam = std::tuple<int, BackendKind>;

class DemoGreedy : public ::testing::TestWithParam<GreedyParam> {};

TEST_P(DemoGreedy, EqualsPyTorchTokenForToken) {
    const DemoCopy& copy = kCopies[std::get<0>(GetParam())];
    auto backend = backend_or_null(std::get<1>(GetParam()));
    if (!backend) GTEST_SKIP() << "backend not available";
    auto stage = load_whole(copy_dir(copy), *backend);
    ASSERT_TRUE(stage);
    const auto& cases = reference()["greedy"][copy.key];
    ASSERT_EQ(cases.size(), 3u);
    std::uint64_t seq = 1;
    for (const auto& c : cases) {
        const auto prompt = c["prompt_ids"].get<std::vector<std::int32_t>>();
        const auto want = c["ids"].get<std::vector<std::int32_t>>();
        ASSERT_EQ(want.size(), c["new_tokens"].get<std::size_t>());

        // All 48 tokens, continuing past <|end|> as PyTorch did.
        GenerateOptions options;
        options.max_new_tokens = static_cast<int>(want.size());
        auto r = generate(*stage, seq++, prompt, options);
        ASSERT_TRUE(r) << r.error().message;
        EXPECT_EQ(r->tokens, want) << copy.key << ": " << c["prompt_text"].get<std::string>();

        // The stop-on-<|end|> view that `brigade run` shows.
        if (!c["first_end_index"].is_null()) {
            options.stop_ids = {reference()["model"]["eos_token_id"].get<std::int32_t>()};
            auto stopped = generate(*stage, seq++, prompt, options);
            ASSERT_TRUE(stopped) << stopped.error().message;
            EXPECT_EQ(stopped->tokens, c["ids_until_end"].get<std::vector<std::int32_t>>());
            EXPECT_EQ(stopped->finish, FinishReason::kStop);
        }
    }
}

std::string greedy_name(const ::testing::TestParamInfo<GreedyParam>& info) {
    const char* backend = std::get<1>(info.param) == BackendKind::kReference ? "reference" : "cpu";
    return std::string(kCopies[std::get<0>(info.param)].key) + "_" + backend;
}

INSTANTIATE_TEST_SUITE_P(AllCopies, DemoGreedy,
                         ::testing::Combine(::testing::Values(0, 1, 2),
                                            ::testing::Values(BackendKind::kReference,
                                                              BackendKind::kCpu)),
                         greedy_name);

// ---- compute_perplexity ---------------------------------------------------------------------

// A deterministic stream of real ids: the held-out text's first 32 tokens, repeated.
std::vector<std::int32_t> heldout_like_ids(std::size_t n) {
    const auto first =
        reference()["heldout"]["first_32_token_ids"].get<std::vector<std::int32_t>>();
    std::vector<std::int32_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = first[(i * 7 + i / 32) % first.size()];
    return ids;
}

// One hand-listed window: run ids [start, end) alone and score tokens [first, end).
struct Window {
    std::int64_t start, end, first;
};

// Scores windows directly through `Stage` and `log_softmax` (float, from sampling.hpp): an
// independent path to the same numbers.
double direct_nll(Stage& stage, const std::vector<std::int32_t>& ids,
                  const std::vector<Window>& windows, std::int64_t& n_scored) {
    double total = 0.0;
    n_scored = 0;
    std::uint64_t seq = 1000;
    for (const auto& w : windows) {
        SequenceBatchEntry e;
        e.seq_id = seq++;
        e.tokens.assign(ids.begin() + w.start, ids.begin() + w.end);
        e.n_tokens = static_cast<std::int32_t>(e.tokens.size());
        e.all_logits = true;
        auto out = stage.run_layers({e});
        EXPECT_TRUE(out) << out.error().message;
        if (!out) return 0.0;
        for (std::int64_t t = w.first; t < w.end; ++t) {
            const auto lp = log_softmax(out->row(t - 1 - w.start));
            total -= lp[static_cast<std::size_t>(ids[static_cast<std::size_t>(t)])];
            ++n_scored;
        }
        stage.kv_cache().release(e.seq_id);
    }
    return total;
}

class DemoPerplexity : public ::testing::Test {
protected:
    void SetUp() override {
        backend_ = backend_or_null(BackendKind::kCpu);
        ASSERT_TRUE(backend_);
        stage_ = load_whole(demo_dir(), *backend_);
        ASSERT_TRUE(stage_);
    }
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Stage> stage_;
};

TEST_F(DemoPerplexity, NonOverlappingWindowsSkipEachWindowsFirstToken) {
    const auto ids = heldout_like_ids(10);
    PerplexityOptions options;
    options.ctx = 4;
    auto r = compute_perplexity(*stage_, ids, options);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->n_windows, 3);
    EXPECT_EQ(r->n_scored, 3 + 3 + 1);
    EXPECT_EQ(r->n_evaluated, 10);
    std::int64_t n_scored = 0;
    const double want = direct_nll(*stage_, ids, {{0, 4, 1}, {4, 8, 5}, {8, 10, 9}}, n_scored);
    EXPECT_EQ(n_scored, r->n_scored);
    EXPECT_NEAR(r->total_nll, want, 1e-4 * want);
    EXPECT_NEAR(r->perplexity(), std::exp(want / 7.0), 1e-4 * r->perplexity());
    EXPECT_NEAR(r->first_window_nll, direct_nll(*stage_, ids, {{0, 4, 1}}, n_scored),
                1e-4 * r->first_window_nll);

    // A trailing window of one token scores nothing and is dropped, as the reference says.
    const std::vector<std::int32_t> nine(ids.begin(), ids.begin() + 9);
    auto r9 = compute_perplexity(*stage_, nine, options);
    ASSERT_TRUE(r9) << r9.error().message;
    EXPECT_EQ(r9->n_windows, 2);
    EXPECT_EQ(r9->n_scored, 6);
    EXPECT_EQ(r9->n_evaluated, 8);

    // Explicit stride == ctx is the same thing.
    options.stride = 4;
    auto same = compute_perplexity(*stage_, ids, options);
    ASSERT_TRUE(same);
    EXPECT_EQ(same->total_nll, r->total_nll);
    EXPECT_EQ(stage_->kv_cache().n_sequences(), 0u) << "scoring must release its sequences";
}

TEST_F(DemoPerplexity, StrideScoresEveryTokenOnceWithMoreContext) {
    const auto ids = heldout_like_ids(12);
    PerplexityOptions options;
    options.ctx = 8;
    options.stride = 3;
    auto r = compute_perplexity(*stage_, ids, options);
    ASSERT_TRUE(r) << r.error().message;
    // Windows [0,8) scores 1..7; [3,11) scores 8..10; [6,12) scores 11.
    std::int64_t n_scored = 0;
    const double want = direct_nll(*stage_, ids, {{0, 8, 1}, {3, 11, 8}, {6, 12, 11}}, n_scored);
    EXPECT_EQ(r->n_windows, 3);
    EXPECT_EQ(r->n_scored, 11);
    EXPECT_EQ(n_scored, 11);
    EXPECT_EQ(r->n_evaluated, 8 + 8 + 6);
    EXPECT_NEAR(r->total_nll, want, 1e-4 * want);

    // Longer: with overlapping windows every token but the first is scored exactly once; with
    // stride == ctx the windows are disjoint and each window's first token goes unscored.
    const auto many = heldout_like_ids(300);
    for (int stride : {1, 7, 64, 99, 100}) {
        options.ctx = 100;
        options.stride = stride;
        auto s = compute_perplexity(*stage_, many, options);
        ASSERT_TRUE(s) << s.error().message;
        const std::int64_t last_start = (300 - 100 + stride - 1) / stride * stride;
        EXPECT_EQ(s->n_windows, last_start / stride + 1) << "stride " << stride;
        EXPECT_EQ(s->n_scored, stride < 100 ? 299 : 300 - s->n_windows) << "stride " << stride;
    }
}

// Running windows a few tokens at a time (decode-shaped steps, which int8 activations need)
// scores the same tokens with the same numbers up to kernel rounding.
TEST_F(DemoPerplexity, StepTokensScoresTheSameTokensAsWholeWindows) {
    const auto ids = heldout_like_ids(70);
    for (int stride : {0, 7}) {
        PerplexityOptions whole;
        whole.ctx = 20;
        whole.stride = stride;
        auto want = compute_perplexity(*stage_, ids, whole);
        ASSERT_TRUE(want) << want.error().message;
        for (int step : {1, 3, 4, 20, 64}) {
            PerplexityOptions stepped = whole;
            stepped.step_tokens = step;
            auto got = compute_perplexity(*stage_, ids, stepped);
            ASSERT_TRUE(got) << got.error().message;
            EXPECT_EQ(got->n_windows, want->n_windows) << "step " << step;
            EXPECT_EQ(got->n_scored, want->n_scored) << "step " << step;
            EXPECT_EQ(got->n_evaluated, want->n_evaluated) << "step " << step;
            EXPECT_NEAR(got->total_nll, want->total_nll, 1e-4 * want->total_nll)
                << "stride " << stride << " step " << step;
        }
    }
    EXPECT_EQ(stage_->kv_cache().n_sequences(), 0u) << "scoring must release its sequences";
    PerplexityOptions bad;
    bad.step_tokens = -1;
    EXPECT_FALSE(validate_perplexity_options(bad, 512));
}

TEST_F(DemoPerplexity, WindowCountPredictionAndCoverageOverManyShapes) {
    const auto all = heldout_like_ids(40);
    for (std::int64_t n : {2, 3, 5, 17, 40}) {
        const std::span<const std::int32_t> ids(all.data(), static_cast<std::size_t>(n));
        for (int ctx : {2, 3, 8, 16}) {
            for (int stride : {0, 1, 3, ctx}) {
                if (stride > ctx) continue;
                const PerplexityOptions options{ctx, stride, 0};
                auto r = compute_perplexity(*stage_, ids, options);
                ASSERT_TRUE(r) << r.error().message;
                const std::string where = "n " + std::to_string(n) + " ctx " + std::to_string(ctx) +
                                          " stride " + std::to_string(stride);
                EXPECT_EQ(perplexity_window_count(n, options), r->n_windows) << where;
                if (stride == 0 || stride == ctx) {
                    // Disjoint windows: every token run is scored except each window's first.
                    EXPECT_EQ(r->n_scored, r->n_evaluated - r->n_windows) << where;
                    EXPECT_GE(r->n_evaluated, n - 1) << where;
                } else {
                    EXPECT_EQ(r->n_scored, n - 1) << where;
                }
                EXPECT_TRUE(std::isfinite(r->total_nll)) << where;
            }
        }
    }
    EXPECT_EQ(perplexity_window_count(37542, {256, 0, 0}), 147);  // reference.json's count
    EXPECT_EQ(perplexity_window_count(37542, {256, 0, 8}), 8);
}

TEST_F(DemoPerplexity, MaxWindowsAndProgressStopEarly) {
    const auto ids = heldout_like_ids(100);
    PerplexityOptions options;
    options.ctx = 10;
    options.max_windows = 3;
    auto r = compute_perplexity(*stage_, ids, options);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->n_windows, 3);
    EXPECT_EQ(r->n_scored, 27);

    options.max_windows = 0;
    std::int64_t calls = 0;
    auto p = compute_perplexity(*stage_, ids, options, [&](const PerplexityResult& so_far) {
        ++calls;
        EXPECT_EQ(so_far.n_windows, calls);
        return calls < 2;
    });
    ASSERT_TRUE(p);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(p->n_windows, 2);
    EXPECT_NEAR(p->total_nll, compute_perplexity(*stage_, ids, {10, 0, 2})->total_nll, 1e-9);
}

TEST_F(DemoPerplexity, BadArgumentsAreErrorsNotCrashes) {
    const auto ids = heldout_like_ids(40);
    const auto fails = [&](std::span<const std::int32_t> x, PerplexityOptions o) {
        auto r = compute_perplexity(*stage_, x, o);
        if (r) return std::string();
        EXPECT_FALSE(r.error().message.empty());
        return r.error().message;
    };
    EXPECT_NE(fails(ids, {1, 0, 0}), "");
    EXPECT_NE(fails(ids, {0, 0, 0}), "");
    EXPECT_NE(fails(ids, {-5, 0, 0}), "");
    const std::string too_long = fails(ids, {513, 0, 0});
    EXPECT_NE(too_long.find("512"), std::string::npos) << too_long;
    EXPECT_NE(fails(ids, {16, 17, 0}), "");
    EXPECT_NE(fails(ids, {16, -1, 0}), "");
    EXPECT_NE(fails(ids, {16, 0, -1}), "");
    EXPECT_NE(fails(std::span(ids).first(1), {16, 0, 0}), "");
    EXPECT_NE(fails({}, {16, 0, 0}), "");
    auto bad_id = ids;
    bad_id[5] = 4096;  // one past the vocabulary
    EXPECT_NE(fails(bad_id, {16, 0, 0}).find("4096"), std::string::npos);
    bad_id[5] = -1;
    EXPECT_NE(fails(bad_id, {16, 0, 0}), "");
    EXPECT_EQ(stage_->kv_cache().n_sequences(), 0u);
    // The full context is allowed.
    EXPECT_EQ(fails(heldout_like_ids(600), {512, 0, 0}), "");

    auto head_only = Stage::load(demo_dir(), {0, 2}, *backend_);
    ASSERT_TRUE(head_only) << head_only.error().message;
    EXPECT_FALSE(compute_perplexity(**head_only, ids, {16, 0, 0}));
}

TEST(TokenNll, IsNegativeLogSoftmax) {
    const std::vector<float> uniform(4096, 3.25f);
    EXPECT_NEAR(token_nll(uniform, 17), std::log(4096.0), 1e-9);
    const std::vector<float> logits = {1.0f, 2.0f, 3.0f, -1000.0f};
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    EXPECT_NEAR(token_nll(logits, 2), std::log(z) - 3.0, 1e-12);
    EXPECT_NEAR(token_nll(logits, 3), std::log(z) + 1000.0, 1e-9);
}

}  // namespace
}  // namespace brigade::model
