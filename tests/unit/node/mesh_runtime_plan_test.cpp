// Several MeshRuntimes in one process over loopback TCP (fake compute side): they find each
// other through --peer seeds and gossip, agree on one plan, and report the same /v1/mesh JSON.

#include <gtest/gtest.h>

#include "tests/unit/node/mesh_runtime_test_util.hpp"

namespace brigade::node::test {
namespace {

using nlohmann::json;

bool all_on_route(std::vector<TestNode*> nodes, std::size_t n_stages) {
    std::optional<PipelineRoute> first;
    for (TestNode* n : nodes) {
        auto r = n->host.route();
        if (!r || r->stages.size() != n_stages) return false;
        if (first && (r->epoch != first->epoch || r->stages != first->stages)) return false;
        if (!first) first = r;
    }
    return true;
}

TEST(MeshRuntimePlan, SingleNodePlansItselfAsTheOneStage) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    ASSERT_TRUE(wait_until([&] { return a.host.route().has_value(); }));
    const PipelineRoute route = *a.host.route();
    ASSERT_EQ(route.stages.size(), 1u);
    EXPECT_EQ(route.stages[0].node, a.runtime.self());
    EXPECT_EQ(route.stages[0].first_layer, 0);
    EXPECT_EQ(route.stages[0].last_layer, 4);
    EXPECT_EQ(route.self, a.runtime.self());
    EXPECT_TRUE(a.runtime.settled());
    EXPECT_EQ(a.host.n_loads(), 1u);

    const json s = a.runtime.status();
    EXPECT_EQ(s["mesh_id"], mesh.id.to_string());
    EXPECT_EQ(s["self"], a.runtime.self().to_string());
    EXPECT_EQ(s["coordinator"], a.runtime.self().to_string());
    EXPECT_EQ(s["epoch"], route.epoch);
    EXPECT_EQ(s["model"], "fake-model");
    ASSERT_EQ(s["nodes"].size(), 1u);
    EXPECT_EQ(s["nodes"][0]["memory_bytes"], 64'000'000u);
    EXPECT_EQ(s["nodes"][0]["backend"], "cpu");
    EXPECT_EQ(s["nodes"][0]["is_self"], true);
    EXPECT_EQ(s["nodes"][0]["state"], "alive");
    EXPECT_EQ(s["nodes"][0]["addresses"][0], a.address().to_string());
    ASSERT_TRUE(s["plan"].is_object());
    EXPECT_EQ(s["plan"]["stages"].size(), 1u);
    EXPECT_EQ(s["plan"]["stages"][0]["steps"], 7u);  // the host's stage stats
    EXPECT_GT(s["plan"]["predicted_tok_s"].get<double>(), 0);
    EXPECT_TRUE(s["unavailable"].is_null());
    a.runtime.stop();
}

TEST(MeshRuntimePlan, TwoNodesSplitTheModelWhenNeitherHoldsIt) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(3'200'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto options = fast_options(3'200'000);
    options.seeds = {a.address()};
    TestNode b(mesh, options);
    ASSERT_TRUE(b.runtime.start(b.host));

    ASSERT_TRUE(wait_until([&] {
        return all_on_route({&a, &b}, 2);
    })) << a.runtime.status().dump(1)
        << "\n"
        << b.runtime.status().dump(1);
    const PipelineRoute ra = *a.host.route();
    const PipelineRoute rb = *b.host.route();
    EXPECT_EQ(ra.self, a.runtime.self());
    EXPECT_EQ(rb.self, b.runtime.self());
    EXPECT_EQ(ra.stages[0].first_layer, 0);
    EXPECT_EQ(ra.stages[0].last_layer, ra.stages[1].first_layer);
    EXPECT_EQ(ra.stages[1].last_layer, 4);
    EXPECT_NE(ra.stages[0].node, ra.stages[1].node);

    // Both answer the same document, apart from self/is_self; links get their RTTs.
    ASSERT_TRUE(wait_until([&] {
        const json s = a.runtime.status();
        if (s["links"].size() != 2) return false;
        for (const auto& l : s["links"]) {
            if (l["rtt_ms"].is_null()) return false;
        }
        return true;
    })) << a.runtime.status().dump(1);
    json sa = a.runtime.status();
    json sb = b.runtime.status();
    EXPECT_EQ(sa["coordinator"], std::min(a.runtime.self(), b.runtime.self()).to_string());
    for (json* s : {&sa, &sb}) {
        s->erase("self");
        s->erase("links");  // RTTs move
        for (auto& n : (*s)["nodes"]) {
            n.erase("is_self");
        }
        for (auto& st : (*s)["plan"]["stages"]) {
            st.erase("steps");
            st.erase("tokens");
            st.erase("mean_step_ms");
        }
    }
    EXPECT_EQ(sa, sb) << sa.dump(1) << "\n" << sb.dump(1);
    EXPECT_EQ(sa["nodes"].size(), 2u);
    EXPECT_EQ(sa["plan"]["stages"].size(), 2u);
    b.runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimePlan, ThreeNodesLearnEachOtherByGossip) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto ob = fast_options(64'000'000);
    ob.seeds = {a.address()};
    TestNode b(mesh, ob);
    ASSERT_TRUE(b.runtime.start(b.host));
    auto oc = fast_options(64'000'000);
    oc.seeds = {b.address()};  // c knows only b; a and c meet through gossip
    TestNode c(mesh, oc);
    ASSERT_TRUE(c.runtime.start(c.host));

    ASSERT_TRUE(wait_until([&] {
        for (TestNode* n : {&a, &b, &c}) {
            if (n->runtime.status()["nodes"].size() != 3) return false;
        }
        return true;
    })) << c.runtime.status().dump(1);
    // Every node could hold the model alone: one stage, on the same node everywhere.
    ASSERT_TRUE(wait_until([&] { return all_on_route({&a, &b, &c}, 1); }));
    // c's link list names a direct link to a.
    ASSERT_TRUE(wait_until([&] {
        const json status = c.runtime.status();
        for (const auto& l : status["links"]) {
            if (l["from"] == c.runtime.self().to_string() &&
                l["to"] == a.runtime.self().to_string()) {
                return true;
            }
        }
        return false;
    }));
    c.runtime.stop();
    b.runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimePlan, ModelThatFitsNowhereSettlesWithTheReason) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(2'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    ASSERT_TRUE(wait_until([&] { return a.runtime.settled(); }));
    EXPECT_FALSE(a.host.route().has_value());
    EXPECT_NE(a.host.why().find("cannot hold the model"), std::string::npos) << a.host.why();
    const json s = a.runtime.status();
    EXPECT_TRUE(s["plan"].is_null());
    EXPECT_NE(s["unavailable"].get<std::string>().find("cannot hold"), std::string::npos);
    EXPECT_EQ(a.host.n_loads(), 0u);

    // A second node brings the memory that was missing: the mesh plans over both.
    auto ob = fast_options(4'200'000);
    ob.seeds = {a.address()};
    TestNode b(mesh, ob);
    ASSERT_TRUE(b.runtime.start(b.host));
    ASSERT_TRUE(wait_until([&] {
        return all_on_route({&a, &b}, 2);
    })) << a.runtime.status().dump(1);
    b.runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimePlan, AStageThatLeavesIsPlannedAround) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(3'200'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(3'200'000);
    o.seeds = {a.address()};
    TestNode b(mesh, o);
    ASSERT_TRUE(b.runtime.start(b.host));
    auto c = std::make_unique<TestNode>(mesh, o);
    ASSERT_TRUE(c->runtime.start(c->host));
    ASSERT_TRUE(wait_until([&] {
        return all_on_route({&a, &b, c.get()}, 2);
    })) << a.runtime.status().dump(1);

    // Stop a stage node that is not a: the others drop it at once (it said goodbye) and
    // re-plan over the two that are left.
    const PipelineRoute before = *a.host.route();
    TestNode* leaving = nullptr;
    for (TestNode* n : {&b, c.get()}) {
        if (before.index_of(n->runtime.self()) >= 0) leaving = n;
    }
    ASSERT_NE(leaving, nullptr);
    TestNode* staying = leaving == &b ? c.get() : &b;
    const mesh::NodeId gone = leaving->runtime.self();
    leaving->runtime.stop();
    ASSERT_TRUE(wait_until([&] {
        auto r = a.host.route();
        return r && r->epoch > before.epoch && r->index_of(gone) < 0 &&
               all_on_route({&a, staying}, 2);
    })) << a.runtime.status().dump(1);
    const auto gone_list = a.host.gone();
    EXPECT_NE(std::find(gone_list.begin(), gone_list.end(), gone), gone_list.end());
    EXPECT_EQ(a.runtime.status()["nodes"].size(), 2u);
    staying->runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimePlan, ALeavingStageIsPlannedAroundBeforeItGoes) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(64'000'000);
    o.seeds = {a.address()};
    TestNode b(mesh, o);
    ASSERT_TRUE(b.runtime.start(b.host));
    ASSERT_TRUE(wait_until([&] { return all_on_route({&a, &b}, 1); }));
    TestNode& stage = a.host.route()->stages[0].node == a.runtime.self() ? a : b;
    TestNode& other = &stage == &a ? b : a;
    const std::uint64_t before = other.host.route()->epoch;

    // The plan moves to the other node while both are still linked; then the leaver may go.
    EXPECT_TRUE(stage.runtime.leave(5s));
    auto moved = other.host.route();
    ASSERT_TRUE(moved.has_value());
    EXPECT_GT(moved->epoch, before);
    EXPECT_EQ(moved->stages.size(), 1u);
    EXPECT_EQ(moved->stages[0].node, other.runtime.self());
    EXPECT_EQ(stage.runtime.status()["nodes"].size(), 2u);  // still a member until stop()
    const json s = other.runtime.status();
    for (const auto& n : s["nodes"]) {
        if (n["id"] == stage.runtime.self().to_string()) {
            EXPECT_EQ(n["memory_bytes"], 0u);
        }
    }
    stage.runtime.stop();
    other.runtime.stop();
}

TEST(MeshRuntimePlan, LeavingReturnsAtOnceWhenNobodyCanTakeOver) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode alone(mesh, fast_options(64'000'000));
    ASSERT_TRUE(alone.runtime.start(alone.host));
    ASSERT_TRUE(wait_until([&] { return alone.host.route().has_value(); }));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(alone.runtime.leave(5s));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_TRUE(alone.host.route().has_value());  // it keeps serving until it stops

    // Two halves of a split: the survivor cannot hold the model, so the leaver gives up at once
    // after the planner says so (not after the limit), and the plan stays.
    TestNode a(mesh, fast_options(3'200'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(3'200'000);
    o.seeds = {a.address()};
    TestNode b(mesh, o);
    ASSERT_TRUE(b.runtime.start(b.host));
    ASSERT_TRUE(wait_until([&] {
        auto ra = a.host.route();
        auto rb = b.host.route();
        return ra && rb && ra->stages.size() == 2 && ra->epoch == rb->epoch;
    }));
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_FALSE(b.runtime.leave(10s));
    EXPECT_LT(std::chrono::steady_clock::now() - t1, 5s);
    EXPECT_EQ(a.host.route()->stages.size(), 2u);
    b.runtime.stop();
    a.runtime.stop();
    alone.runtime.stop();
}

}  // namespace
}  // namespace brigade::node::test
