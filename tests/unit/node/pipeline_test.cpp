// The pipeline in one process: a PipelineHead and StageWorkers (each with its own StageResources
// for its layer range) exchanging frames through a test FrameSender. 1, 2 and 3 stages must give
// the tokens of one stage (and of Hugging Face, for a reference fixture); BF16 activations stay
// within a stated tolerance; concurrent requests do not mix; cancellation frees KV on every
// stage; a request entering at a non-head node streams the same text; engine failures surface
// as 500 errors naming the request; a drain lets running requests finish.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model_config.hpp"
#include "tests/unit/node/pipeline_harness.hpp"

namespace brigade::node {
namespace {

using namespace testing;
using mesh::ActivationDType;

// A HeadRequest for `prompt` generating `n` tokens greedily (or with `sampling`).
HeadRequest head_request(std::uint64_t id, const std::vector<std::int32_t>& prompt, int n,
                         std::int64_t context, model::SamplingParams sampling = {},
                         int top_logprobs = 0) {
    HeadRequest r;
    r.request_id = id;
    r.tokens = prompt;
    r.setup.sampling = sampling;
    r.setup.n_prompt = static_cast<std::int64_t>(prompt.size());
    r.setup.max_new_tokens = n;
    r.setup.context = context;
    r.setup.logprobs = top_logprobs > 0;
    r.setup.top_logprobs = top_logprobs;
    r.log_id = "req-" + std::to_string(id);
    return r;
}

std::vector<mesh::SampledTokenInfo> generate(TestMesh& mesh, const HeadRequest& request) {
    auto events = std::make_shared<RecordingEvents>();
    EXPECT_EQ(mesh.head().submit(request, events), PipelineHead::Submitted::queued);
    EXPECT_TRUE(events->wait()) << "no end of generation";
    EXPECT_FALSE(events->failed) << events->error;
    return events->tokens;
}

std::vector<std::int32_t> ids_of(const std::vector<mesh::SampledTokenInfo>& tokens) {
    std::vector<std::int32_t> out;
    for (const auto& t : tokens) {
        if (t.token >= 0) out.push_back(t.token);
    }
    return out;
}

const std::vector<std::vector<model::LayerRange>>& demo_splits() {
    static const std::vector<std::vector<model::LayerRange>> splits = {
        {{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}};
    return splits;
}

std::vector<std::int32_t> demo_prompt(const std::string& text) {
    auto ids = demo_frontend().tokenizer.encode(text, true);
    EXPECT_TRUE(ids);
    return ids ? *ids : std::vector<std::int32_t>{};
}

TEST(Pipeline, DemoGreedyTokensAreTheSameOnOneTwoAndThreeStagesWithF32) {
    const auto& model = demo_frontend();
    const auto prompt = demo_prompt("Once upon a time, in a small village by the sea,");
    std::vector<std::int32_t> reference;
    for (const auto& split : demo_splits()) {
        TestMesh mesh(model, split, ActivationDType::kF32);
        auto tokens = generate(mesh, head_request(11, prompt, 48, model.context));
        const auto ids = ids_of(tokens);
        ASSERT_EQ(ids.size(), 48u) << split.size() << " stages";
        if (reference.empty()) {
            reference = ids;
        } else {
            EXPECT_EQ(ids, reference) << split.size() << " stages";
        }
        EXPECT_EQ(tokens.back().finish, mesh::TokenFinish::kLength);
        if (split.size() > 1) {
            // One prefill frame and 47 decode frames per hop; one token frame per token.
            EXPECT_EQ(mesh.frames_sent(mesh::MsgType::kActivation), 48u * (split.size() - 1));
            EXPECT_EQ(mesh.frames_sent(mesh::MsgType::kToken), 48u);
        }
        // Everything released at the end but the prefix cache's one entry, on every stage.
        EXPECT_TRUE(mesh.wait_until([&] { return mesh.every_stage_holds(1); }))
            << mesh.total_kv_sequences();
    }
}

// A Hugging Face reference fixture (3 layers, Qwen2, F16 weights) with a frontend built by hand:
// it has no tokenizer of its own (token ids only; the demo tokenizer stands in and is unused).
struct Fixture {
    std::unique_ptr<ModelFrontend> model;
    nlohmann::json expected;
};

Fixture load_fixture(const std::string& name) {
    Fixture f;
    const auto dir = brigade::test::source_dir() / "tests" / "fixtures" / "reference" / name;
    auto config = model::load_model_config(dir);
    EXPECT_TRUE(config) << config.error().message;
    if (!config) return f;
    f.model = std::make_unique<ModelFrontend>(demo_frontend().tokenizer);
    f.model->dir = dir;
    f.model->config = *config;
    f.model->context = config->max_position_embeddings;
    f.model->vocab_size = config->vocab_size;
    f.model->info.id = name;
    std::ifstream in(dir / "expected.json");
    f.expected = nlohmann::json::parse(in);
    return f;
}

TEST(Pipeline, Qwen2FixtureMatchesHuggingFaceGreedyOnOneTwoAndThreeStages) {
    auto f = load_fixture("qwen2_f16");
    ASSERT_TRUE(f.model);
    ASSERT_EQ(f.model->config.n_layers, 3);
    const std::vector<std::vector<model::LayerRange>> splits = {
        {{0, 3}}, {{0, 1}, {1, 3}}, {{0, 1}, {1, 2}, {2, 3}}};
    for (const auto& split : splits) {
        TestMesh mesh(*f.model, split, ActivationDType::kF32);
        for (std::size_t p = 0; p < f.expected["prompts"].size(); ++p) {
            const auto prompt = f.expected["prompts"][p].get<std::vector<std::int32_t>>();
            const auto want = f.expected["greedy"][p].get<std::vector<std::int32_t>>();
            auto tokens = generate(
                mesh,
                head_request(100 + p, prompt, static_cast<int>(want.size()), f.model->context));
            EXPECT_EQ(ids_of(tokens), want) << split.size() << " stages, prompt " << p;
        }
    }
}

TEST(Pipeline, ShardedFixtureStagesReadOnlyTheirShardsAndMatchHuggingFace) {
    auto f = load_fixture("sharded_llama_f32");
    ASSERT_TRUE(f.model);
    ASSERT_EQ(f.model->config.n_layers, 4);
    auto names = [&](model::LayerRange r) {
        std::vector<std::string> out;
        for (const auto& p : weight_files_for_range(f.model->dir, r, 4)) {
            out.push_back(p.filename().string());
        }
        return out;
    };
    // From the fixture's index: embed + layer 0 attention in shard 1, layer 0 MLP and layer 1
    // attention q/k in shard 2, ..., lm_head alone in shard 6.
    const auto all = names({0, 4});
    EXPECT_EQ(all.size(), 6u);
    const auto middle = names({1, 3});
    EXPECT_LT(middle.size(), all.size());
    EXPECT_EQ(std::count(middle.begin(), middle.end(), "model-00006-of-00006.safetensors"), 0)
        << "a middle stage needs no lm_head";
    const auto tail = names({3, 4});
    EXPECT_EQ(std::count(tail.begin(), tail.end(), "model-00006-of-00006.safetensors"), 1);

    const std::vector<std::vector<model::LayerRange>> splits = {
        {{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}};
    for (const auto& split : splits) {
        TestMesh mesh(*f.model, split, ActivationDType::kF32);
        const auto prompt = f.expected["prompts"][0].get<std::vector<std::int32_t>>();
        const auto want = f.expected["greedy"][0].get<std::vector<std::int32_t>>();
        auto tokens = generate(
            mesh, head_request(200, prompt, static_cast<int>(want.size()), f.model->context));
        EXPECT_EQ(ids_of(tokens), want) << split.size() << " stages";
    }
}

TEST(Pipeline, Bf16ActivationsKeepTopLogprobsWithinTolerance) {
    const auto& model = demo_frontend();
    const auto prompt = demo_prompt("The little robot walked into the kitchen and");
    constexpr int kTokens = 24;
    std::vector<mesh::SampledTokenInfo> exact;
    {
        TestMesh mesh(model, {{0, 4}}, ActivationDType::kF32);
        exact = generate(mesh, head_request(5, prompt, kTokens, model.context, {}, 5));
    }
    ASSERT_EQ(exact.size(), static_cast<std::size_t>(kTokens));
    for (const auto& split : {demo_splits()[1], demo_splits()[2]}) {
        TestMesh mesh(model, split, ActivationDType::kBF16);
        auto bf16 = generate(mesh, head_request(5, prompt, kTokens, model.context, {}, 5));
        ASSERT_EQ(bf16.size(), exact.size());
        // Compared while the two generations agree (a near tie may flip a token, after which
        // the histories differ). BF16 keeps 8 bits of mantissa: hidden states carry a relative
        // error of ~2^-9 per hop, which moves these log-probabilities by well under 0.05.
        constexpr double kTolerance = 0.05;
        double worst = 0;
        std::size_t compared = 0;
        for (std::size_t i = 0; i < exact.size() && bf16[i].token == exact[i].token; ++i) {
            ASSERT_EQ(bf16[i].top.size(), 5u);
            worst = std::max(worst, std::abs(double(bf16[i].logprob) - exact[i].logprob));
            for (std::size_t k = 0; k < 5; ++k) {
                // The same alternatives, unless two of them are within the tolerance.
                if (bf16[i].top[k].token != exact[i].top[k].token) {
                    EXPECT_NEAR(bf16[i].top[k].logprob, exact[i].top[k].logprob, 2 * kTolerance);
                    continue;
                }
                worst = std::max(
                    worst, std::abs(double(bf16[i].top[k].logprob) - exact[i].top[k].logprob));
            }
            ++compared;
        }
        EXPECT_GE(compared, 8u) << "BF16 diverged from F32 too early";
        EXPECT_LT(worst, kTolerance) << split.size() << " stages";
        std::printf("BF16 over %zu stages: %zu steps compared, max |logprob diff| %.5f\n",
                    split.size(), compared, worst);
    }
}

TEST(Pipeline, EightConcurrentRequestsAreNotMixed) {
    const auto& model = demo_frontend();
    const std::vector<std::string> texts = {
        "Tell me about the sea.",  "Where do birds live?",  "Once upon a time there was a king.",
        "What did the boy eat?",   "Describe a rainy day.", "How do trains work?",
        "The cat sat on the mat.", "Why is the sky blue?"};
    std::vector<std::string> solo;
    std::vector<std::int64_t> solo_tokens;
    {
        TestMesh one(model, {{0, 4}}, ActivationDType::kF32);
        for (std::size_t i = 0; i < texts.size(); ++i) {
            auto s = start(one.service(0), completion(texts[i], 20, "solo-" + std::to_string(i)));
            ASSERT_TRUE(s.sink->wait());
            ASSERT_TRUE(s.sink->final) << (s.sink->error ? s.sink->error->message : "");
            solo.push_back(s.sink->content);
            solo_tokens.push_back(s.sink->final->usage.completion_tokens);
        }
    }
    PipelineHeadOptions options;
    options.max_active = 8;
    TestMesh mesh(model, demo_splits()[2], ActivationDType::kF32, options);
    std::vector<Started> started;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        started.push_back(
            start(mesh.service(0), completion(texts[i], 20, "c-" + std::to_string(i))));
    }
    for (std::size_t i = 0; i < texts.size(); ++i) {
        ASSERT_TRUE(started[i].sink->wait());
        ASSERT_TRUE(started[i].sink->final)
            << (started[i].sink->error ? started[i].sink->error->message : "");
        EXPECT_EQ(started[i].sink->content, solo[i]) << "request " << i;
        EXPECT_EQ(started[i].sink->final->usage.completion_tokens, solo_tokens[i]);
    }
    // With 8 requests over 3 stages, micro-batches hold ceil(8 / 3) = 3 sequences at most, so
    // several micro-batches were in flight at once. (A count of steps stood for this and flaked:
    // the requests end early, at 89 tokens in all, and the steps varied with the timing, 49-58.)
    const auto t = mesh.head().timings();
    EXPECT_GE(t.max_batches_in_flight, 2u) << t.steps << " steps";
    // Each finished request is a prefix-cache entry, kept on every stage; nothing else is held.
    EXPECT_TRUE(mesh.wait_until([&] { return mesh.every_stage_holds(texts.size()); }))
        << mesh.total_kv_sequences();
}

// The tail samples a batch's requests in parallel on its backend's threads (one stage: the
// head; two: the last worker). Sampled requests, each with its own seed, must give the tokens
// they give alone.
TEST(Pipeline, ConcurrentSampledRequestsOnSeveralThreadsGiveTheirOwnTokens) {
    const auto& model = demo_frontend();
    const std::vector<std::string> texts = {
        "Tell me about the sea.", "Where do birds live?",  "Once upon a time there was a king.",
        "What did the boy eat?",  "Describe a rainy day.", "How do trains work?"};
    auto sampled = [&](std::size_t i, const std::string& id) {
        auto r = completion(texts[i], 16, id);
        r.sampling.temperature = 0.9;
        r.sampling.top_p = 0.95;
        r.sampling.seed = 1000 + i;
        return r;
    };
    std::vector<std::string> solo;
    {
        TestMesh one(model, {{0, 4}}, ActivationDType::kF32);
        for (std::size_t i = 0; i < texts.size(); ++i) {
            auto s = start(one.service(0), sampled(i, "solo-" + std::to_string(i)));
            ASSERT_TRUE(s.sink->wait());
            ASSERT_TRUE(s.sink->final) << (s.sink->error ? s.sink->error->message : "");
            solo.push_back(s.sink->content);
        }
    }
    PipelineHeadOptions options;
    options.max_active = 6;
    for (const auto& ranges :
         {std::vector<model::LayerRange>{{0, 4}}, std::vector<model::LayerRange>{{0, 2}, {2, 4}}}) {
        TestMesh mesh(model, ranges, ActivationDType::kF32, options, 0, 7, 3);
        std::vector<Started> started;
        for (std::size_t i = 0; i < texts.size(); ++i) {
            started.push_back(start(mesh.service(0), sampled(i, "c-" + std::to_string(i))));
        }
        for (std::size_t i = 0; i < texts.size(); ++i) {
            ASSERT_TRUE(started[i].sink->wait());
            ASSERT_TRUE(started[i].sink->final)
                << (started[i].sink->error ? started[i].sink->error->message : "");
            EXPECT_EQ(started[i].sink->content, solo[i])
                << ranges.size() << " stages, request " << i;
        }
    }
}

TEST(Pipeline, CancelFreesKvOnEveryStage) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, demo_splits()[2], ActivationDType::kBF16);
    auto request = completion("Tell me a very long story about a dragon.", 400);
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    auto s = start(mesh.service(0), request);
    ASSERT_TRUE(mesh.wait_until([&] { return s.sink->deltas() > 5; }));
    ASSERT_TRUE(mesh.wait_until([&] {
        return mesh.head().n_kv_sequences() == 1 && mesh.worker(1).n_kv_sequences() == 1 &&
               mesh.worker(2).n_kv_sequences() == 1;
    })) << "the request should hold KV on every stage while it runs";
    s.cancel->cancel();
    ASSERT_TRUE(s.sink->wait());
    EXPECT_FALSE(s.sink->final);
    EXPECT_TRUE(mesh.wait_until([&] { return mesh.total_kv_sequences() == 0; }))
        << "head " << mesh.head().n_kv_sequences() << ", stage 1 "
        << mesh.worker(1).n_kv_sequences() << ", stage 2 " << mesh.worker(2).n_kv_sequences();
    EXPECT_EQ(mesh.head().n_active(), 0u);
    EXPECT_EQ(mesh.service(0).n_in_flight(), 0u);
}

TEST(Pipeline, RequestAtANonHeadNodeStreamsTheSameText) {
    const auto& model = demo_frontend();
    // Nodes 0-1: the stages; node 2: an origin without layers.
    TestMesh mesh(model, demo_splits()[1], ActivationDType::kF32, {}, /*n_origins=*/1);
    auto request = completion("Where do birds live?", 30);
    request.logprobs = true;
    request.top_logprobs = 2;
    auto at_head = start(mesh.service(0), request);
    ASSERT_TRUE(at_head.sink->wait());
    ASSERT_TRUE(at_head.sink->final);
    for (std::size_t origin : {1u, 2u}) {
        auto remote = start(mesh.service(origin), request);
        ASSERT_TRUE(remote.sink->wait()) << "origin " << origin;
        ASSERT_TRUE(remote.sink->final) << (remote.sink->error ? remote.sink->error->message : "");
        EXPECT_EQ(remote.sink->content, at_head.sink->content);
        ASSERT_EQ(remote.sink->logprobs.size(), at_head.sink->logprobs.size());
        for (std::size_t i = 0; i < remote.sink->logprobs.size(); ++i) {
            EXPECT_EQ(remote.sink->logprobs[i].token, at_head.sink->logprobs[i].token);
            // The later requests reuse the first one's cached prompt (all but its last token),
            // so their last prompt row runs on its own: its key and value come from the one-row
            // matmul kernels (~1e-7 from the prompt's), and the f16 KV cache can round that to
            // a whole f16 step (2^-11) on a few elements; attention then sums over other key
            // splits. Measured 3.4e-5 (1.7e-6 with an f32 cache); a wrong position or request
            // moves logprobs by nats.
            EXPECT_NEAR(remote.sink->logprobs[i].logprob, at_head.sink->logprobs[i].logprob, 1e-3);
        }
        EXPECT_EQ(remote.sink->final->usage.prompt_tokens,
                  at_head.sink->final->usage.prompt_tokens);
        EXPECT_EQ(remote.sink->final->usage.completion_tokens, 30);
        EXPECT_EQ(remote.sink->final->finish_reason, api::FinishReason::length);
        ASSERT_TRUE(remote.sink->prompt);
    }
    EXPECT_GE(mesh.frames_sent(mesh::MsgType::kRequest), 2u);
    EXPECT_GE(mesh.frames_sent(mesh::MsgType::kRequestUpdate), 60u);
}

TEST(Pipeline, StopStringAtARemoteOriginCancelsAtTheHead) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, demo_splits()[1], ActivationDType::kF32, {}, /*n_origins=*/1);
    auto full = start(mesh.service(0), completion("Once upon a time", 40));
    ASSERT_TRUE(full.sink->wait());
    const std::string text = full.sink->content;
    ASSERT_GT(text.size(), 12u);
    auto request = completion("Once upon a time", 40);
    request.stop = {text.substr(6, 4)};
    auto s = start(mesh.service(2), request);
    ASSERT_TRUE(s.sink->wait());
    ASSERT_TRUE(s.sink->final);
    EXPECT_EQ(s.sink->content, text.substr(0, 6));
    EXPECT_EQ(s.sink->final->finish_reason, api::FinishReason::stop);
    // The first request is a cached prefix on both stages; the stopped one is not kept.
    EXPECT_TRUE(mesh.wait_until([&] { return mesh.every_stage_holds(1); }))
        << mesh.total_kv_sequences();
    EXPECT_EQ(mesh.head().n_active(), 0u);
}

TEST(Pipeline, EngineFailureIsA500NamingTheRequestAndTheHeadKeepsServing) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, demo_splits()[2], ActivationDType::kF32);
    // Corrupt the positions of the third activation frame stage 1 receives.
    std::atomic<int> seen{0};
    mesh.set_filter([&](const mesh::NodeId&, const mesh::NodeId& to, mesh::Message& m) {
        auto* a = std::get_if<mesh::ActivationFrame>(&m);
        if (a != nullptr && to == node_id(1) && ++seen == 3) a->entries[0].pos0 += 5;
        return true;
    });
    auto broken = completion("Tell me about the sea.", 20, "cmpl-broken");
    broken.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    auto bad = start(mesh.service(0), broken);
    ASSERT_TRUE(bad.sink->wait());
    ASSERT_TRUE(bad.sink->error);
    EXPECT_EQ(bad.sink->error->kind, api::ErrorKind::internal);
    EXPECT_NE(bad.sink->error->message.find("cmpl-broken"), std::string::npos)
        << bad.sink->error->message;
    EXPECT_NE(bad.sink->error->message.find("position"), std::string::npos)
        << bad.sink->error->message;
    EXPECT_TRUE(mesh.wait_until([&] { return mesh.total_kv_sequences() == 0; }));

    mesh.set_filter(nullptr);
    auto good = start(mesh.service(0), completion("Tell me about the sea.", 20, "cmpl-fine"));
    ASSERT_TRUE(good.sink->wait());
    EXPECT_TRUE(good.sink->final) << (good.sink->error ? good.sink->error->message : "");
}

TEST(Pipeline, LostTokenTimesOutInsteadOfHanging) {
    const auto& model = demo_frontend();
    PipelineHeadOptions options;
    options.token_timeout = std::chrono::milliseconds(300);
    TestMesh mesh(model, demo_splits()[1], ActivationDType::kF32, options);
    mesh.set_filter([](const mesh::NodeId&, const mesh::NodeId&, mesh::Message& m) {
        return !std::holds_alternative<mesh::TokenFrame>(m);  // the tail's tokens never arrive
    });
    auto s = start(mesh.service(0), completion("Hello", 5));
    ASSERT_TRUE(s.sink->wait(std::chrono::seconds(10)));
    ASSERT_TRUE(s.sink->error);
    EXPECT_EQ(s.sink->error->kind, api::ErrorKind::unavailable);
    EXPECT_TRUE(mesh.wait_until([&] { return mesh.total_kv_sequences() == 0; }));
}

TEST(Pipeline, DrainLetsARunningRequestFinish) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, demo_splits()[1], ActivationDType::kF32);
    auto request = completion("Tell me a story.", 60);
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    auto running = start(mesh.service(0), request);
    ASSERT_TRUE(mesh.wait_until([&] { return running.sink->deltas() > 2; }));
    const bool was_running = !running.sink->finished();
    std::thread stopper([&] { mesh.head().stop(std::chrono::seconds(30)); });
    ASSERT_TRUE(mesh.wait_until([&] {
        auto events = std::make_shared<RecordingEvents>();
        return mesh.head().submit(head_request(77, {5, 6}, 1, model.context), events) ==
               PipelineHead::Submitted::stopping;
    }));
    ASSERT_TRUE(running.sink->wait());
    stopper.join();
    EXPECT_TRUE(was_running) << "finished before the drain began; the test proves nothing";
    EXPECT_TRUE(running.sink->final) << (running.sink->error ? running.sink->error->message : "");
    if (running.sink->final) {
        EXPECT_EQ(running.sink->final->usage.completion_tokens, 60);
    }
}

TEST(Pipeline, DrainDeadlineFailsWhatIsLeftWith503) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, demo_splits()[1], ActivationDType::kF32);
    auto request = completion("Tell me a very long story.", 400);
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    auto running = start(mesh.service(0), request);
    ASSERT_TRUE(mesh.wait_until([&] { return running.sink->deltas() > 2; }));
    mesh.head().stop(std::chrono::milliseconds(50));
    ASSERT_TRUE(running.sink->wait());
    ASSERT_TRUE(running.sink->error);
    EXPECT_EQ(running.sink->error->kind, api::ErrorKind::unavailable);
}

}  // namespace
}  // namespace brigade::node
