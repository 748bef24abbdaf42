// The KV budget of a node that runs the whole model (serve --memory less the weights) at work
// in the in-process pipeline: a request that can never fit fails alone with a 400 naming the KV
// memory and the requests beside it finish unchanged, cached prefixes give their room to
// running requests, a new request that does not fit yet waits, and a running one that outgrows
// the room pauses and resumes with the same text.
#include <gtest/gtest.h>

#include "node/kv_admission.hpp"
#include "node/model_loading.hpp"
#include "tests/unit/node/pipeline_harness.hpp"

namespace brigade::node {
namespace {

using namespace testing;
using mesh::ActivationDType;

// A greedy HeadRequest for `text` that never stops before `n` new tokens.
HeadRequest long_request(std::uint64_t id, const std::string& text, int n) {
    const auto& model = demo_frontend();
    HeadRequest r;
    r.request_id = id;
    r.tokens = model.tokenizer.encode(text, true).value();
    r.setup.n_prompt = static_cast<std::int64_t>(r.tokens.size());
    r.setup.max_new_tokens = n;
    r.setup.context = model.context;
    for (auto stop : model.stop_ids) r.setup.logit_bias.push_back({stop, -100.0f});
    r.log_id = "req-" + std::to_string(id);
    return r;
}

std::shared_ptr<RecordingEvents> submit(TestMesh& mesh, const HeadRequest& r) {
    auto events = std::make_shared<RecordingEvents>();
    EXPECT_EQ(mesh.head().submit(r, events), PipelineHead::Submitted::queued);
    return events;
}

std::uint64_t positions_bytes(TestMesh& mesh, std::size_t node, std::int64_t positions) {
    return mesh.kv(node).bytes_per_position() * static_cast<std::uint64_t>(positions);
}

TEST(KvBudget, BudgetIsWhatTheWeightsLeaveOfTheOfferedMemory) {
    EXPECT_EQ(kv_budget_bytes(0, 1000), 0u);  // nothing offered: no limit
    EXPECT_EQ(kv_budget_bytes(5000, 1000), 4000u);
    EXPECT_EQ(kv_budget_bytes(1000, 1000), 1u);  // no room, not "no limit"
    EXPECT_EQ(kv_budget_bytes(10, 1000), 1u);

    // load_stage_resources applies it.
    StageLoadOptions options;
    options.backend = "cpu";
    options.n_threads = 1;
    options.show_progress = false;
    options.memory_bytes = std::uint64_t{64} << 20;
    auto loaded = load_stage_resources(demo_frontend(), {0, 4}, options, *quiet_logger());
    ASSERT_TRUE(loaded) << loaded.error().message;
    const auto weights = (*loaded)->stage->weights().n_bytes;
    EXPECT_GT(weights, 0u);
    EXPECT_EQ((*loaded)->stage->kv_cache().limits().max_bytes, options.memory_bytes - weights);

    // A stage of a split sets no budget of its own: its head bounds the pipeline's positions.
    for (const model::LayerRange range : {model::LayerRange{0, 2}, model::LayerRange{2, 4}}) {
        auto part = load_stage_resources(demo_frontend(), range, options, *quiet_logger());
        ASSERT_TRUE(part) << part.error().message;
        EXPECT_EQ((*part)->stage->kv_cache().limits().max_bytes, 0u) << range.first;
    }
}

TEST(KvBudget, RefusalSaysWhetherWaitingHelps) {
    auto backend = model::make_backend(model::BackendKind::kReference).value();
    const std::uint64_t per_position = 2 * 8 * 4;
    model::KvCache kv(*backend, 1, 8, {1000, 300 * per_position}, model::DType::kF32);
    EXPECT_FALSE(reserve_kv(kv, 1, 200));
    auto busy = reserve_kv(kv, 2, 101);  // fits alone, not beside sequence 1
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->kind, api::ErrorKind::overloaded);
    EXPECT_NE(busy->message.find("KV"), std::string::npos) << busy->message;
    auto never = reserve_kv(kv, 3, 301);  // past the budget on its own
    ASSERT_TRUE(never);
    EXPECT_EQ(never->kind, api::ErrorKind::context_length_exceeded);
    EXPECT_FALSE(kv.contains(2));
    EXPECT_FALSE(kv.contains(3));
}

// Two requests on one stage whose budget holds 300 positions: the first takes a 256-position
// allocation and stays within it; the second runs past what is left and fails alone.
TEST(KvBudget, RequestPastTheBudgetFailsAloneAndTheOtherIsUnchanged) {
    const auto& model = demo_frontend();
    std::vector<std::int32_t> alone;
    {
        TestMesh one(model, {{0, 4}}, ActivationDType::kF32);
        auto e = submit(one, long_request(1, "Tell me about the sea.", 120));
        ASSERT_TRUE(e->wait());
        ASSERT_FALSE(e->failed) << e->error;
        alone = e->ids();
    }
    PipelineHeadOptions options;
    options.max_active = 2;
    TestMesh mesh(model, {{0, 4}}, ActivationDType::kF32, options);
    mesh.kv(0).set_max_bytes(positions_bytes(mesh, 0, 300));
    auto first = submit(mesh, long_request(1, "Tell me about the sea.", 120));
    auto second = submit(mesh, long_request(2, "Once upon a time there was a king.", 400));
    ASSERT_TRUE(first->wait());
    ASSERT_TRUE(second->wait());
    EXPECT_FALSE(first->failed) << first->error;
    EXPECT_EQ(first->ids(), alone);
    ASSERT_TRUE(second->failed);
    EXPECT_TRUE(*second->failed == api::ErrorKind::overloaded ||
                *second->failed == api::ErrorKind::context_length_exceeded);
    EXPECT_NE(second->error.find("KV"), std::string::npos) << second->error;
    EXPECT_NE(second->error.find("req-2"), std::string::npos) << second->error;
    EXPECT_LT(second->ids().size(), 400u);
}

// A finished request's KV stays as a cached prefix (~210 positions); a later request that
// needs the room (~160 more, past the budget of 300) gets it.
TEST(KvBudget, CachedPrefixesGiveTheirRoomToRunningRequests) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, {{0, 4}}, ActivationDType::kF32);
    mesh.kv(0).set_max_bytes(positions_bytes(mesh, 0, 300));
    auto first = submit(mesh, long_request(1, "Tell me about the sea.", 200));
    ASSERT_TRUE(first->wait());
    ASSERT_FALSE(first->failed) << first->error;
    ASSERT_TRUE(mesh.wait_until([&] { return mesh.head().n_kv_sequences() == 1; }))
        << "the finished request should be kept as a cached prefix";
    auto second = submit(mesh, long_request(2, "Once upon a time there was a king.", 150));
    ASSERT_TRUE(second->wait());
    EXPECT_FALSE(second->failed) << second->error;
    EXPECT_EQ(second->ids().size(), 150u);
}

// A new request whose prompt does not fit beside a running one waits for it to end (no 429),
// then runs as it would alone.
TEST(KvBudget, NewRequestWaitsForRoomInsteadOfFailing) {
    const auto& model = demo_frontend();
    std::string text = "Once upon a time there was a king who lived in a big castle by the sea.";
    text += " " + text + " " + text;
    std::vector<std::int32_t> alone;
    {
        TestMesh one(model, {{0, 4}}, ActivationDType::kF32);
        auto e = submit(one, long_request(9, text, 40));
        ASSERT_TRUE(e->wait());
        ASSERT_FALSE(e->failed) << e->error;
        alone = e->ids();
    }
    const auto prompt = long_request(2, text, 40).tokens.size();
    ASSERT_GT(prompt, 45u);  // 255 + 46 > 300: it cannot start beside the first one

    PipelineHeadOptions options;
    options.max_active = 2;
    TestMesh mesh(model, {{0, 4}}, ActivationDType::kF32, options);
    mesh.kv(0).set_max_bytes(positions_bytes(mesh, 0, 300));
    auto first = submit(mesh, long_request(1, "Tell me about the sea.", 290));
    ASSERT_TRUE(mesh.wait_until([&] { return first->ids().size() >= 250; }));
    auto second = submit(mesh, long_request(2, text, 40));
    ASSERT_TRUE(first->wait());
    ASSERT_TRUE(second->wait());
    EXPECT_FALSE(first->failed) << first->error;
    EXPECT_EQ(first->ids().size(), 290u);
    EXPECT_FALSE(second->failed) << second->error;
    EXPECT_EQ(second->ids(), alone);
}

// Two requests that together outgrow the budget on one stage: the one that runs out of room
// gives its KV back, waits for the other to end, computes its tokens again and finishes with
// the text it would have had alone.
TEST(KvBudget, OneStageSequencePausesInsteadOfFailingWhenBothOutgrowTheBudget) {
    const auto& model = demo_frontend();
    std::vector<std::vector<std::int32_t>> alone;
    const std::vector<std::string> texts = {"Tell me about the sea.", "Where do birds live?"};
    {
        TestMesh one(model, {{0, 4}}, ActivationDType::kF32);
        for (std::size_t i = 0; i < texts.size(); ++i) {
            auto e = submit(one, long_request(10 + i, texts[i], 200));
            ASSERT_TRUE(e->wait());
            ASSERT_FALSE(e->failed) << e->error;
            alone.push_back(e->ids());
        }
    }
    PipelineHeadOptions options;
    options.max_active = 2;
    TestMesh mesh(model, {{0, 4}}, ActivationDType::kF32, options);
    mesh.kv(0).set_max_bytes(positions_bytes(mesh, 0, 300));
    std::vector<std::shared_ptr<RecordingEvents>> events;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        events.push_back(submit(mesh, long_request(1 + i, texts[i], 200)));
    }
    for (std::size_t i = 0; i < texts.size(); ++i) {
        ASSERT_TRUE(events[i]->wait());
        EXPECT_FALSE(events[i]->failed) << events[i]->error;
        EXPECT_EQ(events[i]->ids(), alone[i]) << "request " << i;
    }
    EXPECT_GE(mesh.head().n_preempted(), 1u);
}

// The head of a split bounds its KV by the positions its route says every stage holds
// (MeshRuntime computes them with mesh::pipeline_kv_positions); without a figure it is unbounded
// as the other stages are.
TEST(KvBudget, TheHeadOfASplitKeepsItsSequencesWithinThePositionsOfItsRoute) {
    const auto& model = demo_frontend();
    for (const std::uint64_t positions : {std::uint64_t{300}, std::uint64_t{0}}) {
        PipelineRoute route;
        route.epoch = 3;
        route.self = node_id(0);
        route.stages = {{node_id(0), 0, 2}, {node_id(1), 2, 4}};
        route.kv_positions = positions;
        auto resources = load_range(model, {0, 2}, 1);
        PipelineHead head(model, resources, route, nullptr, {}, quiet_logger());
        const auto& kv = resources->stage->kv_cache();
        EXPECT_EQ(kv.limits().max_bytes, positions * kv.bytes_per_position()) << positions;
    }
}

// The same in a pipeline of two stages, one request greedy and one sampled with a seed and a
// frequency penalty: the head bounds the KV (its budget stands for every stage's, see
// pipeline_kv_positions), the one that runs out of room gives its KV back on both stages, and
// its rerun on the tail (a new sampler that takes the generated tokens as history) goes on with
// the draws it would have made alone.
TEST(KvBudget, TwoStageSequencePausesInsteadOfFailingWhenBothOutgrowTheBudget) {
    const auto& model = demo_frontend();
    std::vector<HeadRequest> requests = {long_request(1, "Tell me about the sea.", 200),
                                         long_request(2, "Where do birds live?", 200)};
    requests[1].setup.sampling.temperature = 0.9f;
    requests[1].setup.sampling.seed = 1234;
    requests[1].setup.sampling.frequency_penalty = 0.5f;
    std::vector<std::vector<std::int32_t>> alone;
    {
        TestMesh one(model, {{0, 2}, {2, 4}}, ActivationDType::kF32);
        for (const auto& r : requests) {
            auto e = submit(one, r);
            ASSERT_TRUE(e->wait());
            ASSERT_FALSE(e->failed) << e->error;
            alone.push_back(e->ids());
        }
    }
    PipelineHeadOptions options;
    options.max_active = 2;
    TestMesh mesh(model, {{0, 2}, {2, 4}}, ActivationDType::kF32, options);
    mesh.kv(0).set_max_bytes(positions_bytes(mesh, 0, 300));
    std::vector<std::shared_ptr<RecordingEvents>> events;
    for (const auto& r : requests) events.push_back(submit(mesh, r));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        ASSERT_TRUE(events[i]->wait());
        EXPECT_FALSE(events[i]->failed) << events[i]->error;
        EXPECT_EQ(events[i]->ids(), alone[i]) << "request " << i;
    }
    EXPECT_GE(mesh.head().n_preempted(), 1u);
}

}  // namespace
}  // namespace brigade::node
