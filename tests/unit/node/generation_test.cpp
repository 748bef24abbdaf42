// GenerationSetup encoding and TokenSampler: strict decoding, and a sampler resumed from the
// prompt plus k generated tokens continuing exactly like an uninterrupted one (issue 7).

#include "node/generation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <string>

#include "tests/unit/node/node_test_support.hpp"

namespace brigade::node {
namespace {

using testing::demo_frontend;
using testing::load_range;

GenerationSetup rich_setup() {
    GenerationSetup s;
    s.sampling.temperature = 0.8f;
    s.sampling.top_k = 40;
    s.sampling.top_p = 0.95f;
    s.sampling.min_p = 0.01f;
    s.sampling.repetition_penalty = 1.3f;
    s.sampling.presence_penalty = 0.5f;
    s.sampling.frequency_penalty = -0.25f;
    s.sampling.seed = 0x0123456789abcdefULL;
    s.logit_bias = {{5, -100.0f}, {17, 2.5f}, {4095, 100.0f}};
    s.json_object = true;
    s.logprobs = true;
    s.top_logprobs = 5;
    s.n_prompt = 12;
    s.max_new_tokens = 300;
    s.context = 512;
    return s;
}

TEST(GenerationSetup, RoundTrip) {
    const auto setup = rich_setup();
    const auto bytes = encode_generation_setup(setup);
    auto decoded = decode_generation_setup(bytes);
    ASSERT_TRUE(decoded) << decoded.error().message;
    EXPECT_EQ(*decoded, setup);

    GenerationSetup plain;  // defaults: greedy, no bias
    plain.n_prompt = 1;
    plain.context = 1;
    auto d2 = decode_generation_setup(encode_generation_setup(plain));
    ASSERT_TRUE(d2) << d2.error().message;
    EXPECT_EQ(*d2, plain);
}

// The layout other nodes read (version 1): fields little-endian in a fixed order, so a node
// of another build decodes what this one encodes. A change that kept the round trip but moved
// or resized a field fails here.
TEST(GenerationSetup, WireLayoutIsFixed) {
    const auto bytes = encode_generation_setup(rich_setup());
    // version, 7 x 4 sampling fields, seed, bias count, 3 x (id, bias), flags, top_logprobs,
    // 3 x 8 limits.
    ASSERT_EQ(bytes.size(), 1u + 28 + 8 + 4 + 3 * 8 + 2 + 24);
    auto le = [&](std::size_t at, int n) {
        std::uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= std::uint64_t{bytes[at + i]} << (8 * i);
        return v;
    };
    EXPECT_EQ(bytes[0], 1);
    EXPECT_EQ(le(1, 4), std::bit_cast<std::uint32_t>(0.8f));  // temperature
    EXPECT_EQ(le(5, 4), 40u);                                 // top_k
    EXPECT_EQ(le(29, 8), 0x0123456789abcdefULL);              // seed
    EXPECT_EQ(le(37, 4), 3u);                                 // logit_bias entries
    EXPECT_EQ(le(41 + 16, 4), 4095u);                         // the third token id
    EXPECT_EQ(bytes[65], 3);                                  // flags: JSON | logprobs
    EXPECT_EQ(bytes[66], 5);                                  // top_logprobs
    EXPECT_EQ(le(67, 8), 12u);                                // n_prompt
    EXPECT_EQ(le(83, 8), 512u);                               // context
}

TEST(GenerationSetup, EveryTruncationIsRejected) {
    const auto bytes = encode_generation_setup(rich_setup());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        auto d = decode_generation_setup(std::span(bytes).first(n));
        EXPECT_FALSE(d) << "prefix of " << n << " bytes decoded";
    }
    auto longer = bytes;
    longer.push_back(0);
    auto d = decode_generation_setup(longer);
    ASSERT_FALSE(d);
    EXPECT_NE(d.error().message.find("trailing"), std::string::npos) << d.error().message;
}

TEST(GenerationSetup, CorruptValuesAreRejected) {
    const auto good = encode_generation_setup(rich_setup());
    auto expect_rejected = [](std::vector<std::uint8_t> bytes, const std::string& what) {
        auto d = decode_generation_setup(bytes);
        ASSERT_FALSE(d) << what;
        EXPECT_NE(d.error().message.find("generation setup"), std::string::npos);
    };
    {
        auto b = good;
        b[0] = 2;  // unknown version
        expect_rejected(b, "version");
    }
    {
        auto b = good;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(&b[1], &nan, 4);  // temperature
        expect_rejected(b, "NaN temperature");
    }
    {
        auto b = good;
        const std::uint32_t huge = 0xffffffffu;  // logit_bias count beyond the bytes
        std::memcpy(&b[37], &huge, 4);           // after version, 7 x 4 bytes, seed
        expect_rejected(b, "bias count");
    }
    {
        auto s = rich_setup();
        s.top_logprobs = 21;
        expect_rejected(encode_generation_setup(s), "top_logprobs");
    }
    {
        auto s = rich_setup();
        s.n_prompt = s.context + 1;
        expect_rejected(encode_generation_setup(s), "prompt beyond context");
    }
    {
        auto s = rich_setup();
        s.max_new_tokens = -1;
        expect_rejected(encode_generation_setup(s), "negative max_new_tokens");
    }
    {
        auto s = rich_setup();
        s.logit_bias.push_back({-3, 1.0f});
        expect_rejected(encode_generation_setup(s), "negative bias id");
    }
    {
        auto s = rich_setup();
        s.sampling.top_p = 0.0f;
        expect_rejected(encode_generation_setup(s), "top_p 0");
    }
    // Flip every byte once: either still a valid setup (then it round-trips) or a clean error.
    for (std::size_t i = 0; i < good.size(); ++i) {
        auto b = good;
        b[i] ^= 0xA5;
        auto d = decode_generation_setup(b);
        if (d) {
            EXPECT_EQ(encode_generation_setup(*d), b) << "byte " << i;
        }
    }
}

// Runs the demo model over `prompt` and generates `n` tokens with `sampler`, recording the
// logits each token was sampled from.
struct Generated {
    std::vector<mesh::SampledTokenInfo> tokens;
    std::vector<std::vector<float>> logits;
};

Generated generate(model::Stage& stage, std::uint64_t seq, const std::vector<std::int32_t>& prompt,
                   TokenSampler& sampler, int n) {
    Generated g;
    EXPECT_TRUE(sampler.observe(0, prompt));
    model::SequenceBatchEntry e;
    e.seq_id = seq;
    e.tokens = prompt;
    e.n_tokens = static_cast<std::int32_t>(prompt.size());
    for (int i = 0; i < n; ++i) {
        auto out = stage.run_layers({e});
        EXPECT_TRUE(out);
        if (!out) break;
        const auto row = out->last_row(0, e);
        g.logits.emplace_back(row.begin(), row.end());
        auto t = sampler.sample(row);
        g.tokens.push_back(t);
        if (t.finish != mesh::TokenFinish::kContinue) break;
        e.pos0 += e.n_tokens;
        e.n_tokens = 1;
        e.tokens = {t.token};
        EXPECT_TRUE(sampler.observe(e.pos0, e.tokens));  // seen again as the next row
    }
    stage.kv_cache().release(seq);
    return g;
}

void expect_resume_matches(GenerationSetup setup, const std::string& text, int n, int k) {
    const auto& model = demo_frontend();
    auto resources = load_range(model, {0, model.config.n_layers});
    ASSERT_TRUE(resources);
    auto prompt = model.tokenizer.encode(text, true);
    ASSERT_TRUE(prompt);
    setup.n_prompt = static_cast<std::int64_t>(prompt->size());
    setup.max_new_tokens = n;
    setup.context = model.context;
    TokenTexts texts(model.tokenizer);

    TokenSampler whole(7, setup, model, texts);
    const auto full = generate(*resources->stage, 1, *prompt, whole, n);
    ASSERT_GT(static_cast<int>(full.tokens.size()), k + 2) << "too short to test a resume";

    // A new sampler that sees the prompt and the first k tokens (as a new pipeline would),
    // then samples from the same logits the uninterrupted run saw.
    TokenSampler resumed(7, setup, model, texts);
    std::vector<std::int32_t> history = *prompt;
    for (int i = 0; i < k; ++i) history.push_back(full.tokens[static_cast<std::size_t>(i)].token);
    ASSERT_TRUE(resumed.observe(0, history));
    EXPECT_EQ(resumed.n_generated(), k);
    for (std::size_t i = static_cast<std::size_t>(k); i < full.tokens.size(); ++i) {
        auto t = resumed.sample(full.logits[i]);
        EXPECT_EQ(t, full.tokens[i]) << "step " << i;
        if (t.finish != mesh::TokenFinish::kContinue) break;
        resumed.observe(static_cast<std::int32_t>(history.size()), std::span(&t.token, 1));
        history.push_back(t.token);
    }
    EXPECT_EQ(resumed.finished(), whole.finished());
}

TEST(TokenSampler, ResumedGreedyContinuesIdentically) {
    GenerationSetup s;
    s.sampling.temperature = 0;
    expect_resume_matches(s, "Once upon a time", 40, 11);
}

TEST(TokenSampler, ResumedSeededWithPenaltiesContinuesIdentically) {
    GenerationSetup s;
    s.sampling.temperature = 1.1f;
    s.sampling.top_p = 0.9f;
    s.sampling.top_k = 50;
    s.sampling.repetition_penalty = 1.2f;
    s.sampling.presence_penalty = 0.6f;
    s.sampling.frequency_penalty = 0.4f;
    s.sampling.seed = 1234;
    s.logit_bias = {{100, 3.0f}};
    s.logprobs = true;
    s.top_logprobs = 3;
    expect_resume_matches(s, "The little robot", 48, 17);
}

TEST(TokenSampler, ResumedJsonModeContinuesIdentically) {
    GenerationSetup s;
    s.sampling.temperature = 0.7f;
    s.sampling.seed = 99;
    s.json_object = true;
    expect_resume_matches(s, "Reply in JSON:", 40, 5);
}

// Two samplers of `setup` (prompt {5, 6}, n_prompt 2) fed the same random rows of `n_logits`
// logits (normal, sd `sigma`) step by step until the request ends or `max_steps`: one samples
// on this thread, the other with its row's passes in chunks on `host`. Every SampledTokenInfo
// (token, logprob, top_logprobs, finish) must be equal. Returns the steps run.
int expect_chunked_samples_equal(GenerationSetup setup, const ModelFrontend& model,
                                 TokenTexts& texts, model::Backend& host, std::mt19937& rng,
                                 float sigma, std::size_t n_logits, int max_steps,
                                 const std::string& label) {
    setup.n_prompt = 2;
    setup.max_new_tokens = max_steps;
    setup.context = 4096;
    TokenSampler alone(1, setup, model, texts), chunked(1, setup, model, texts);
    const std::int32_t prompt[] = {5, 6};
    EXPECT_TRUE(alone.observe(0, prompt));
    EXPECT_TRUE(chunked.observe(0, prompt));
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> logits(n_logits);
    int step = 0;
    while (step < max_steps) {
        for (auto& x : logits) x = nd(rng);
        const auto a = alone.sample(logits);
        const auto b = chunked.sample(logits, &host);
        ++step;
        EXPECT_EQ(b, a) << label << ", step " << step;
        if (b != a || a.finish != mesh::TokenFinish::kContinue) break;
        if (setup.logprobs) {
            EXPECT_EQ(a.top.size(), static_cast<std::size_t>(setup.top_logprobs));
        }
        const auto pos = static_cast<std::int32_t>(alone.history().size());
        EXPECT_TRUE(alone.observe(pos, std::span(&a.token, 1)));
        EXPECT_TRUE(chunked.observe(pos, std::span(&b.token, 1)));
    }
    return step;
}

// One request alone is sampled with the row's passes in chunks on the stage's threads
// (sample_batch): its tokens, logprobs, top_logprobs, JSON mask and bias must be those of one
// thread. Rows of 40,000 logits (three chunks; ids past the demo tokenizer's vocabulary are
// padding rows, masked in JSON mode), JSON mode on (until no token can continue the object)
// and off.
TEST(TokenSampler, ChunksOnTheHostThreadsGiveTheTokensOfOneThread) {
    const auto& model = demo_frontend();
    TokenTexts texts(model.tokenizer);
    auto host = model::make_backend(model::BackendKind::kCpu, model::BackendOptions{3});
    ASSERT_TRUE(host);
    std::mt19937 rng(5);
    for (const bool json : {true, false}) {
        GenerationSetup s = rich_setup();
        s.json_object = json;
        const int steps = expect_chunked_samples_equal(s, model, texts, **host, rng, 3.0f, 40000,
                                                       24, json ? "json" : "plain");
        // A stop token or a closed object ends a request early; a few steps must run.
        EXPECT_GE(steps, 2) << (json ? "json" : "plain");
    }
}

// JSON mode on Qwen2.5's 151,643-token vocabulary (its tokenizer from ../shared/data; no
// weights needed): the mask of a state not seen before is built in chunks of the vocabulary on
// the host's threads, each with its own copy of the validator. Every step's token, logprob
// (whose normalizer covers exactly the allowed tokens) and top_logprobs equal one thread's.
TEST(TokenSampler, JsonMasksOfALargeVocabularyInChunksGiveOneThreadsTokens) {
    const auto data = test::shared_data_dir();
    if (data.empty()) GTEST_SKIP() << "../shared/data is absent";
    ServeModelOptions options;
    options.model_ref = (data / "qwen2.5").string();
    auto model = load_model_frontend(options, *testing::quiet_logger());
    ASSERT_TRUE(model) << model.error().message;
    TokenTexts texts(model->tokenizer);
    auto host = model::make_backend(model::BackendKind::kCpu, model::BackendOptions{3});
    ASSERT_TRUE(host);
    std::mt19937 rng(9);
    // Random logits close an object (or leave no token to continue it) within a few tokens:
    // several requests, each until it ends.
    int steps = 0;
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        GenerationSetup s;
        s.sampling.temperature = 1.0f;
        s.sampling.seed = seed;
        s.json_object = true;
        s.logprobs = true;
        s.top_logprobs = 3;
        steps += expect_chunked_samples_equal(s, *model, texts, **host, rng, 2.0f,
                                              static_cast<std::size_t>(model->vocab_size), 40,
                                              "request " + std::to_string(seed));
    }
    EXPECT_GE(steps, 20) << "the outputs ended before the masks were exercised";
}

TEST(TokenSampler, StopsAtMaxNewTokensAndStopIds) {
    const auto& model = demo_frontend();
    TokenTexts texts(model.tokenizer);
    GenerationSetup s;
    s.n_prompt = 2;
    s.max_new_tokens = 2;
    s.context = model.context;
    std::vector<float> logits(static_cast<std::size_t>(model.vocab_size), 0.0f);
    logits[42] = 10.0f;
    TokenSampler sampler(3, s, model, texts);
    const std::int32_t prompt[] = {5, 6};
    ASSERT_TRUE(sampler.observe(0, prompt));
    auto a = sampler.sample(logits);
    EXPECT_EQ(a.token, 42);
    EXPECT_EQ(a.request_id, 3u);
    EXPECT_EQ(a.finish, mesh::TokenFinish::kContinue);
    auto b = sampler.sample(logits);
    EXPECT_EQ(b.finish, mesh::TokenFinish::kLength);
    EXPECT_TRUE(sampler.finished());

    ASSERT_FALSE(model.stop_ids.empty());
    s.max_new_tokens = 10;
    TokenSampler stopper(4, s, model, texts);
    ASSERT_TRUE(stopper.observe(0, prompt));
    logits[static_cast<std::size_t>(model.stop_ids.front())] = 20.0f;
    auto c = stopper.sample(logits);
    EXPECT_EQ(c.token, model.stop_ids.front());
    EXPECT_EQ(c.finish, mesh::TokenFinish::kStop);

    s.max_new_tokens = 0;  // max_tokens: 0 ends without a token
    TokenSampler none(5, s, model, texts);
    ASSERT_TRUE(none.observe(0, prompt));
    auto d = none.sample(logits);
    EXPECT_EQ(d.token, -1);
    EXPECT_EQ(d.finish, mesh::TokenFinish::kLength);

    TokenSampler gap(6, s, model, texts);
    EXPECT_FALSE(gap.observe(3, prompt));
    EXPECT_TRUE(gap.history().empty());
}

}  // namespace
}  // namespace brigade::node
