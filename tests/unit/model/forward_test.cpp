// The forward pass on tiny random checkpoints written by tests: every MLX bit width and group
// size against the same weights dequantized to F32, storage layouts (unaligned, sharded) that
// must not change a single bit, long prompts that grow the KV cache, and bad batches.
#include "model/forward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/backend.hpp"
#include "model/forwarding_backend.hpp"
#include "model/generate.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/model/tiny_model.hpp"

namespace brigade::model {
namespace {

SequenceBatchEntry entry(std::uint64_t seq, std::vector<std::int32_t> tokens, std::int32_t pos0 = 0,
                         bool all = true) {
    SequenceBatchEntry e;
    e.seq_id = seq;
    e.n_tokens = static_cast<std::int32_t>(tokens.size());
    e.tokens = std::move(tokens);
    e.pos0 = pos0;
    e.all_logits = all;
    return e;
}

std::vector<float> logits_of(const std::filesystem::path& dir, Backend& backend,
                             const std::vector<std::int32_t>& prompt) {
    auto config = load_model_config(dir);
    EXPECT_TRUE(config);
    auto s = Stage::load(dir, {0, config->n_layers}, backend);
    EXPECT_TRUE(s) << s.error().message;
    if (!s) return {};
    auto out = (*s)->run_layers({entry(1, prompt)});
    EXPECT_TRUE(out) << out.error().message;
    return out ? out->logits : std::vector<float>{};
}

const std::vector<std::int32_t> kPrompt = {1, 17, 42, 5, 77, 3, 90, 12};

class QuantizedForward : public ::testing::TestWithParam<std::tuple<int, int, BackendKind>> {};

// The quantized model computes what F32 weights holding dequant(quant(w)) compute: the packed
// matmul, the quantized embedding lookup and the quantized tied lm_head are all exercised.
TEST_P(QuantizedForward, EqualsDequantizedFloatModel) {
    const auto [bits, group, kind] = GetParam();
    auto backend = make_backend(kind);
    if (!backend) GTEST_SKIP() << backend.error().message;
    for (const bool tie : {false, true}) {
        for (const std::string model_type : {"llama", "qwen3"}) {
            test::TinyModelSpec spec;
            spec.model_type = model_type;
            spec.hidden = 128;
            spec.intermediate = 256;
            spec.head_dim = 32;
            spec.layers = 2;
            spec.tie = tie;
            spec.bits = bits;
            spec.group_size = group;
            spec.dtype = bits % 2 == 0 ? "BF16" : "F16";
            spec.pad_header = false;
            test::TempDir q_dir, f_dir;
            test::write_tiny_model(q_dir.path(), spec);
            spec.dequantized_floats = true;
            test::write_tiny_model(f_dir.path(), spec);
            const auto q = logits_of(q_dir.path(), **backend, kPrompt);
            const auto f = logits_of(f_dir.path(), **backend, kPrompt);
            ASSERT_EQ(q.size(), f.size());
            ASSERT_FALSE(q.empty());
            float scale = 1.0f;
            for (float v : f) scale = std::max(scale, std::fabs(v));
            // The reference decodes weights exactly: only f32 summation order differs. The
            // optimized backend rounds activations to int16 per weight group for quantized
            // matmuls (model/cpu/matmul_int16.cpp), ~1.5e-5 relative per dot product, which these
            // random 2-layer models amplify to ~1e-3 of the largest logit. A packing or
            // scale/bias mistake gives errors of the order of the logits themselves.
            const float rel = kind == BackendKind::kReference ? 2e-5f : 2e-3f;
            EXPECT_LE(test::max_abs_diff(q.data(), f.data(), q.size()), rel * scale)
                << model_type << (tie ? " tied" : " untied");
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    AllWidths, QuantizedForward,
    ::testing::Combine(::testing::Values(2, 3, 4, 5, 6, 8), ::testing::Values(32, 64, 128),
                       ::testing::Values(BackendKind::kReference, BackendKind::kCpu)),
    [](const auto& info) {
        return "b" + std::to_string(std::get<0>(info.param)) + "_g" +
               std::to_string(std::get<1>(info.param)) +
               (std::get<2>(info.param) == BackendKind::kReference ? "_reference" : "_cpu");
    });

TEST(Forward, StorageLayoutDoesNotChangeABit) {
    auto backend = make_backend(BackendKind::kReference).value();
    test::TinyModelSpec spec;
    spec.model_type = "qwen2";
    spec.dtype = "BF16";
    test::TempDir plain, unaligned, sharded;
    test::write_tiny_model(plain.path(), spec);
    spec.pad_header = false;
    test::write_tiny_model(unaligned.path(), spec);
    spec.sharded = true;
    test::write_tiny_model(sharded.path(), spec);
    const auto a = logits_of(plain.path(), *backend, kPrompt);
    EXPECT_EQ(a, logits_of(unaligned.path(), *backend, kPrompt));
    EXPECT_EQ(a, logits_of(sharded.path(), *backend, kPrompt));
}

TEST(Forward, LongPromptGrowsTheCacheAndMatchesChunkedPrefill) {
    auto backend = make_backend(BackendKind::kReference).value();
    test::TinyModelSpec spec;
    spec.layers = 2;
    spec.hidden = 32;
    spec.heads = 2;
    spec.kv_heads = 1;
    spec.intermediate = 64;
    spec.extra_config = {{"max_position_embeddings", 700}};
    test::TempDir dir;
    test::write_tiny_model(dir.path(), spec);
    std::vector<std::int32_t> prompt;
    for (int i = 0; i < 600; ++i) prompt.push_back((i * 37 + 11) % spec.vocab);
    auto one = Stage::load(dir.path(), {0, 2}, *backend).value();
    auto chunked = Stage::load(dir.path(), {0, 2}, *backend).value();
    const auto want = one->run_layers({entry(1, prompt, 0, false)}).value().logits;
    std::vector<float> got;
    for (std::size_t pos = 0; pos < prompt.size(); pos += 250) {
        const std::size_t n = std::min<std::size_t>(250, prompt.size() - pos);
        std::vector<std::int32_t> chunk(prompt.begin() + pos, prompt.begin() + pos + n);
        got = chunked->run_layers({entry(1, chunk, static_cast<std::int32_t>(pos), false)})
                  .value()
                  .logits;
    }
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-4f);
    EXPECT_EQ(chunked->kv_cache().length(1), 600);
    EXPECT_EQ(chunked->kv_cache().bytes_used(), 600u * chunked->kv_cache().bytes_per_position());
    // Past max_position_embeddings: a clear error, nothing computed.
    std::vector<std::int32_t> more(101, 3);
    auto over = chunked->run_layers({entry(1, more, 600)});
    ASSERT_FALSE(over);
    EXPECT_EQ(over.error().code, errc::out_of_range);
    EXPECT_EQ(chunked->kv_cache().length(1), 600);
}

// Records, at each matmul of a layer's q/k/v, what the stage last said its rows are.
class DecodeStepsRecorder final : public ForwardingBackend {
public:
    using ForwardingBackend::ForwardingBackend;
    void set_rows_are_decode_steps(bool decode_steps) override {
        decode_steps_ = decode_steps;
        ForwardingBackend::set_rows_are_decode_steps(decode_steps);
    }
    void matmul_many(std::span<const MatmulJob> jobs, const float* x, std::int64_t n) override {
        seen.push_back(decode_steps_);
        ForwardingBackend::matmul_many(jobs, x, n);
    }
    std::vector<bool> seen;

private:
    bool decode_steps_ = false;
};

// A stage tells its backend whether a batch's rows are decode steps (one token per sequence),
// which lets the CPU backend's AMX tiles take two digits for them: prompts and batches with a
// prompt chunk are not. The stage runs on a plain ForwardingBackend over the recorder, as the
// bench's op profile wraps a backend: the hint must pass through a decorator.
TEST(Forward, StageSaysWhenItsRowsAreDecodeSteps) {
    auto reference = make_backend(BackendKind::kReference).value();
    DecodeStepsRecorder backend(*reference);
    Backend& recorder = backend;
    ForwardingBackend decorated(recorder);
    test::TinyModelSpec spec;
    spec.layers = 2;
    test::TempDir dir;
    test::write_tiny_model(dir.path(), spec);
    auto stage = Stage::load(dir.path(), {0, 2}, decorated).value();
    auto rows_were_decode_steps = [&](const std::vector<SequenceBatchEntry>& batch) {
        backend.seen.clear();
        EXPECT_TRUE(stage->run_layers(batch));
        EXPECT_EQ(backend.seen.size(), 2u);  // one q/k/v per layer
        const bool all =
            std::all_of(backend.seen.begin(), backend.seen.end(), [](bool b) { return b; });
        const bool none =
            std::none_of(backend.seen.begin(), backend.seen.end(), [](bool b) { return b; });
        EXPECT_TRUE(all || none);
        return all;
    };
    EXPECT_FALSE(rows_were_decode_steps({entry(1, {1, 2, 3, 4}, 0)}));
    EXPECT_FALSE(rows_were_decode_steps({entry(2, {5, 6}, 0)}));
    EXPECT_TRUE(rows_were_decode_steps({entry(1, {7}, 4)}));
    EXPECT_TRUE(rows_were_decode_steps({entry(1, {8}, 5), entry(2, {9}, 2)}));
    EXPECT_FALSE(rows_were_decode_steps({entry(1, {10}, 6), entry(3, {1, 2, 3}, 0)}));
    EXPECT_TRUE(rows_were_decode_steps({entry(1, {11}, 7), entry(2, {12}, 3), entry(3, {4}, 3)}));
}

TEST(Forward, BadBatchesAreErrors) {
    auto backend = make_backend(BackendKind::kReference).value();
    test::TinyModelSpec spec;
    spec.layers = 2;
    test::TempDir dir;
    test::write_tiny_model(dir.path(), spec);
    auto full = Stage::load(dir.path(), {0, 2}, *backend).value();
    auto tail = Stage::load(dir.path(), {1, 2}, *backend).value();
    EXPECT_FALSE(full->run_layers({}));
    EXPECT_FALSE(full->run_layers({entry(1, {1, 2}), entry(1, {3})}));  // same sequence twice
    EXPECT_FALSE(full->run_layers({entry(1, {1, 2}, 5)}));              // pos0 != cached
    EXPECT_FALSE(full->run_layers({entry(1, {1, spec.vocab})}));        // id out of vocab
    EXPECT_FALSE(full->run_layers({entry(1, {-1})}));
    auto e = entry(1, {1, 2});
    e.n_tokens = 3;
    EXPECT_FALSE(full->run_layers({e}));  // ids != n_tokens
    std::vector<float> hidden(static_cast<std::size_t>(spec.hidden), 0.0f);
    EXPECT_FALSE(tail->run_layers({entry(1, {}, 0)}, hidden));  // n_tokens 0
    auto two = entry(1, {});
    two.n_tokens = 2;
    auto r = tail->run_layers({two}, hidden);  // 1 row for 2 tokens
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("hidden state"), std::string::npos);
    EXPECT_EQ(full->kv_cache().length(1), 0);
}

TEST(Generate, StopsAtStopIdsAndReusesCachedPrefix) {
    auto backend = make_backend(BackendKind::kReference).value();
    test::TinyModelSpec spec;
    spec.layers = 2;
    test::TempDir dir;
    test::write_tiny_model(dir.path(), spec);
    auto s = Stage::load(dir.path(), {0, 2}, *backend).value();
    GenerateOptions o;
    o.max_new_tokens = 12;
    auto a = generate(*s, 1, kPrompt, o).value();
    ASSERT_EQ(a.tokens.size(), 12u);
    EXPECT_EQ(a.finish, FinishReason::kLength);
    // Stop at the third generated token.
    o.stop_ids = {a.tokens[2]};
    auto b = generate(*s, 2, kPrompt, o).value();
    EXPECT_EQ(b.finish, FinishReason::kStop);
    ASSERT_LE(b.tokens.size(), 3u);
    EXPECT_EQ(b.tokens.back(), a.tokens[2]);
    // Sequence 1 holds prompt + 11 generated tokens; continuing from prompt + 5 of them reuses
    // the cache and only runs the last token.
    std::vector<std::int32_t> longer = kPrompt;
    longer.insert(longer.end(), a.tokens.begin(), a.tokens.begin() + 5);
    o.stop_ids.clear();
    o.max_new_tokens = 4;
    auto c = generate(*s, 1, longer, o).value();
    EXPECT_EQ(c.n_prompt_computed, 1);
    EXPECT_EQ(c.tokens, std::vector<std::int32_t>(a.tokens.begin() + 5, a.tokens.begin() + 9));
    // Cancelling from the callback.
    int calls = 0;
    auto d = generate(*s, 3, kPrompt, o, [&](const GenerationStep&) { return ++calls < 2; });
    EXPECT_EQ(d.value().finish, FinishReason::kCancelled);
    EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace brigade::model
