// Prefix reuse over several stages (KvPrefix frames): the head's prefix cache decides what is
// kept, reused and evicted, and every other stage mirrors it, so a request whose prompt starts
// like an earlier one computes only the rest on every stage and reports the reused tokens, with
// the text of a run without the cache. Entries the head does not keep, or evicts, are freed on
// every stage; a stage that lost an entry fails that one request clearly and the next one
// computes the prompt afresh.

#include <gtest/gtest.h>

#include <algorithm>

#include "model/forward.hpp"
#include "model/kv_cache.hpp"
#include "tests/unit/node/pipeline_harness.hpp"

namespace brigade::node {
namespace {

using namespace testing;
using mesh::ActivationDType;

const std::vector<std::vector<model::LayerRange>>& splits() {
    static const std::vector<std::vector<model::LayerRange>> s = {
        {{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}};
    return s;
}

const std::string kCommon =
    "Once upon a time there was a little girl who lived in a small house near the woods with "
    "her mother, her father and a big brown dog. Every morning she";

struct Outcome {
    std::string content;
    std::int64_t cached = -1;
    std::int64_t positions = 0;  // what the KV holds at the end: prompt + generated - 1
    std::string error;
};

Outcome run(TestMesh& mesh, api::CompletionRequest request) {
    auto s = start(mesh.service(0), std::move(request));
    Outcome o;
    if (!s.sink->wait()) {
        o.error = "no end of generation";
    } else if (s.sink->error) {
        o.error = s.sink->error->message;
    } else if (s.sink->final) {
        o.content = s.sink->content;
        o.cached = s.sink->final->usage.cached_tokens;
        o.positions =
            s.sink->final->usage.prompt_tokens + s.sink->final->usage.completion_tokens - 1;
    }
    return o;
}

api::CompletionRequest sampled(const std::string& prompt, int n) {
    auto r = completion(prompt, n);
    r.sampling.temperature = 0.9;
    r.sampling.seed = 20261121;
    r.sampling.repetition_penalty = 1.3;  // looks at the prompt: the tail's history must hold it
    return r;
}

// Every stage holds the same KV sequences as the head once all requests ended: the cached
// entries, mirrored.
::testing::AssertionResult stages_mirror_the_head(TestMesh& mesh, std::size_t expected) {
    const bool ok = mesh.wait_until([&] {
        if (mesh.head().n_kv_sequences() != expected) return false;
        for (std::size_t i = 1; i < mesh.n_stages(); ++i) {
            if (mesh.worker(i).n_kv_sequences() != expected) return false;
        }
        return true;
    });
    if (ok) return ::testing::AssertionSuccess();
    auto failure = ::testing::AssertionFailure()
                   << "expected " << expected << " KV sequences on every stage; head "
                   << mesh.head().n_kv_sequences();
    for (std::size_t i = 1; i < mesh.n_stages(); ++i) {
        failure << ", stage " << i << " " << mesh.worker(i).n_kv_sequences();
    }
    return failure;
}

TEST(PrefixReuse, SecondRequestReusesThePrefixOnEveryStageAndGivesTheUncachedText) {
    const auto& model = demo_frontend();
    PipelineHeadOptions no_cache;
    no_cache.prefix_cache_bytes = 0;
    for (const auto& split : splits()) {
        SCOPED_TRACE(std::to_string(split.size()) + " stage(s)");
        TestMesh mesh(model, split, ActivationDType::kF32);
        TestMesh reference(model, split, ActivationDType::kF32, no_cache);

        const auto first = run(mesh, completion(kCommon + " went to the river", 24));
        ASSERT_EQ(first.error, "");
        EXPECT_EQ(first.cached, 0);

        const auto second = run(mesh, completion(kCommon + " saw a bird", 24));
        const auto second_ref = run(reference, completion(kCommon + " saw a bird", 24));
        ASSERT_EQ(second.error, "");
        ASSERT_EQ(second_ref.error, "");
        EXPECT_GT(second.cached, 20) << "the common prefix was computed again";
        EXPECT_EQ(second_ref.cached, 0);
        EXPECT_EQ(second.content, second_ref.content);

        // Seeded sampling with a penalty over the history (prompt included) after a reuse.
        const auto third = run(mesh, sampled(kCommon + " saw a cat", 24));
        const auto third_ref = run(reference, sampled(kCommon + " saw a cat", 24));
        ASSERT_EQ(third.error, "");
        ASSERT_EQ(third_ref.error, "");
        EXPECT_GT(third.cached, 20);
        EXPECT_EQ(third.content, third_ref.content);

        // Kept entries (one per distinct continuation) are mirrored, nothing else is held.
        EXPECT_TRUE(stages_mirror_the_head(mesh, 3));
        EXPECT_TRUE(stages_mirror_the_head(reference, 0));
    }
}

TEST(PrefixReuse, WhatTheHeadCannotKeepOrEvictsIsFreedOnEveryStage) {
    const auto& model = demo_frontend();
    const auto& split = splits()[2];
    // A budget below any entry: every finished request is kept, then dropped at once.
    PipelineHeadOptions tiny;
    tiny.prefix_cache_bytes = 1;
    {
        TestMesh mesh(model, split, ActivationDType::kBF16, tiny);
        ASSERT_EQ(run(mesh, completion(kCommon, 8)).error, "");
        ASSERT_EQ(run(mesh, completion("Where do birds live?", 8)).error, "");
        EXPECT_TRUE(stages_mirror_the_head(mesh, 0));
    }
    // Room for the largest entry of these prompts but not for two: each new one evicts the one
    // before on every stage. (The head holds layer 0: one layer of K and V per position, in the
    // KV cache's default element type.)
    const std::vector<std::string> prompts = {"Where do birds live?",
                                              "What did the little boy eat?",
                                              "Once upon a time there was a king."};
    auto request = [&](const std::string& prompt) {
        auto r = completion(prompt, 16);
        r.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};  // all 16 tokens
        return r;
    };
    std::int64_t largest = 0, smallest = 1 << 30;
    {
        TestMesh sizes(model, split, ActivationDType::kBF16, tiny);
        for (const auto& p : prompts) {
            const auto o = run(sizes, request(p));
            ASSERT_EQ(o.error, "");
            largest = std::max(largest, o.positions);
            smallest = std::min(smallest, o.positions);
        }
    }
    ASSERT_LT(largest, 2 * smallest) << "the prompts cannot show a one-entry budget";
    const auto per_position = std::uint64_t{2} * model.config.kv_dim() *
                              model::kv_element_bytes(model::StageOptions{}.kv_dtype);
    PipelineHeadOptions one;
    one.prefix_cache_bytes = per_position * static_cast<std::uint64_t>(largest);
    TestMesh mesh(model, split, ActivationDType::kBF16, one);
    for (const auto& p : prompts) {
        ASSERT_EQ(run(mesh, request(p)).error, "");
        EXPECT_TRUE(stages_mirror_the_head(mesh, 1)) << p;
    }
}

TEST(PrefixReuse, AStageThatLostTheEntryFailsThatRequestAndTheNextComputesAfresh) {
    const auto& model = demo_frontend();
    TestMesh mesh(model, splits()[2], ActivationDType::kF32);
    TestMesh reference(model, splits()[2], ActivationDType::kF32);
    // The tail never hears that the first request is kept.
    mesh.set_filter([](const mesh::NodeId&, const mesh::NodeId& to, mesh::Message& m) {
        const auto* k = std::get_if<mesh::KvPrefix>(&m);
        return !(k && k->op == mesh::KvPrefixOp::kKeep && to == node_id(2));
    });
    ASSERT_EQ(run(mesh, completion(kCommon + " went to the river", 16)).error, "");

    const auto lost = run(mesh, completion(kCommon + " saw a bird", 16));
    EXPECT_NE(lost.error.find("cached prefix"), std::string::npos) << lost.error;

    const auto again = run(mesh, completion(kCommon + " saw a bird", 16));
    const auto want = run(reference, completion(kCommon + " saw a bird", 16));
    ASSERT_EQ(again.error, "");
    EXPECT_EQ(again.cached, 0) << "the entry that failed was used again";
    EXPECT_EQ(again.content, want.content);
}

}  // namespace
}  // namespace brigade::node
