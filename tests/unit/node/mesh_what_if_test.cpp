// `brigade plan --url`'s input: a /v1/mesh document (made by mesh_status_json, as a node makes
// it) turned back into the planner's request gives the plan the mesh's own request gives;
// suspect nodes and nodes without a report are left out as the coordinator leaves them out;
// nodes are taken out by id prefix and hypothetical ones added.
#include "node/mesh_what_if.hpp"

#include <gtest/gtest.h>

#include "node/mesh_status.hpp"

namespace brigade::node {
namespace {

mesh::NodeId id_of(std::uint8_t first) {
    mesh::NodeId id;
    id.bytes[0] = first;
    id.bytes[1] = 0x5a;
    return id;
}

ModelShapeInfo shape() {
    ModelShapeInfo info;
    info.shape.n_layers = 8;
    info.shape.hidden_size = 512;
    info.shape.vocab_size = 1000;
    info.shape.layer_bytes.assign(8, 1'000'000);
    info.shape.embedding_bytes = 1'000'000;
    info.shape.lm_head_bytes = 1'000'000;
    info.shape.kv_bytes_per_token_per_layer = 100;
    return info;
}

MeshStatusNode node(mesh::NodeId id, std::uint64_t memory, double speed, bool suspect = false) {
    MeshStatusNode n{id, {}, suspect, std::nullopt};
    n.capacity = mesh::CapacityReport{id, memory, "cpu", "m", speed, {}, {}};
    n.capacity->kv_bytes_per_token_per_layer = 100;
    return n;
}

TEST(MeshWhatIf, TheMeshsOwnInputsGiveTheMeshsPlan) {
    const auto a = id_of(1), b = id_of(2), c = id_of(3), d = id_of(4), e = id_of(5);
    MeshStatusInput in;
    in.self = in.coordinator = a;
    in.context_tokens = 2048;
    in.expected_concurrency = 2;
    in.activation_bytes = 4;
    in.nodes = {node(a, 6'000'000, 2e-3), node(b, 5'000'000, 1e-3), node(c, 9'000'000, 1e-3, true),
                MeshStatusNode{d, {}, false, std::nullopt}, node(e, 4'000'000, 3e-3)};
    in.nodes[0].capacity->links = {{b, 800, 50e6}, {e, 0, 0}};
    in.nodes[1].capacity->links = {{a, 900, 0}};
    const auto doc = mesh_status_json(in);

    auto what_if = what_if_from_mesh(doc, shape());
    ASSERT_TRUE(what_if) << what_if.error().message;
    const mesh::PlanRequest& r = what_if->request;
    ASSERT_EQ(r.nodes.size(), 3u);  // c is suspect, d has not reported
    EXPECT_EQ(r.nodes[0].id, a);
    EXPECT_EQ(r.nodes[1].memory_bytes, 5'000'000u);
    EXPECT_EQ(r.nodes[2].kv_bytes_per_token_per_layer, 100u);
    EXPECT_EQ(r.context_tokens, 2048);
    EXPECT_EQ(r.expected_concurrency, 2);
    EXPECT_EQ(r.activation_bytes, 4u);
    ASSERT_EQ(r.links.size(), 2u);  // a -> e not measured yet
    EXPECT_DOUBLE_EQ(r.links[0].rtt_s, 0.0008);
    EXPECT_DOUBLE_EQ(r.links[0].bandwidth_bytes_per_s, 50e6);
    EXPECT_EQ(what_if->name_of(b), b.short_string());

    // The request a coordinator would build from the same members.
    mesh::PlanRequest direct;
    direct.shape = shape().shape;
    direct.context_tokens = 2048;
    direct.expected_concurrency = 2;
    direct.activation_bytes = 4;
    direct.nodes = {{a, 6'000'000, 2e-3, "cpu", 100},
                    {b, 5'000'000, 1e-3, "cpu", 100},
                    {e, 4'000'000, 3e-3, "cpu", 100}};
    direct.links = {{a, b, 0.0008, 50e6}, {b, a, 0.0009, 0}};
    direct.default_rtt_s = mesh::median_measured_rtt_s(direct.links, direct.default_rtt_s);
    auto expected = mesh::make_plan(direct);
    auto got = mesh::make_plan(r);
    ASSERT_TRUE(expected && got);
    ASSERT_EQ(got->stages.size(), expected->stages.size());
    for (std::size_t i = 0; i < got->stages.size(); ++i) {
        EXPECT_EQ(got->stages[i].node, expected->stages[i].node) << i;
        EXPECT_EQ(got->stages[i].layers.first, expected->stages[i].layers.first) << i;
        EXPECT_EQ(got->stages[i].layers.last, expected->stages[i].layers.last) << i;
    }
    EXPECT_DOUBLE_EQ(got->single_stream_tok_s, expected->single_stream_tok_s);
}

// The committed plan as `brigade plan --url` compares with: its stages in order, those of
// another shape left out.
TEST(MeshWhatIf, TheCommittedStagesAreReadAndOddOnesLeftOut) {
    const auto a = id_of(1), b = id_of(2);
    MeshStatusInput in;
    in.self = in.coordinator = a;
    in.nodes = {node(a, 6'000'000, 2e-3), node(b, 5'000'000, 1e-3)};
    in.plan = mesh::PlanPropose{4, a, "m", {{a, 0, 3}, {b, 3, 8}}, 100.0};
    const auto stages = committed_stages_from_mesh(mesh_status_json(in));
    ASSERT_EQ(stages.size(), 2u);
    EXPECT_EQ(stages[0].id, a);
    EXPECT_EQ(stages[0].node, a.short_string());
    EXPECT_EQ(stages[1].layers.first, 3);
    EXPECT_EQ(stages[1].layers.last, 8);

    const nlohmann::json odd = {
        {"plan",
         {{"stages",
           {"text",
            {{"node", 5}},
            {{"node", "x"}, {"first_layer", 0}, {"last_layer", "2"}},
            {{"node", "not-an-id"}, {"first_layer", 1}, {"last_layer", 2}}}}}}};
    const auto kept = committed_stages_from_mesh(odd);
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_EQ(kept[0].node, "not-an-id");
    EXPECT_TRUE(kept[0].id.is_zero());
    EXPECT_TRUE(committed_stages_from_mesh({{"plan", nullptr}}).empty());
    EXPECT_TRUE(committed_stages_from_mesh(nlohmann::json::array()).empty());
}

TEST(MeshWhatIf, NodesTakenOutByIdPrefixAndAdded) {
    // Ids that differ only from their 10th byte on: their first 16 characters are the same.
    mesh::NodeId a, b;
    a.bytes[10] = 1;
    b.bytes[10] = 2;
    ASSERT_EQ(a.to_string().substr(0, 8), b.to_string().substr(0, 8));
    MeshStatusInput in;
    in.self = in.coordinator = a;
    in.context_tokens = 512;
    in.nodes = {node(a, 12'000'000, 1e-3), node(b, 12'000'000, 1e-3)};
    in.nodes[0].capacity->links = {{b, 500, 0}};
    auto what_if = what_if_from_mesh(mesh_status_json(in), shape());
    ASSERT_TRUE(what_if);

    EXPECT_FALSE(remove_node(*what_if, "abc"));       // too short to be sure
    EXPECT_FALSE(remove_node(*what_if, "zzzzzzzz"));  // no such node
    auto ambiguous = remove_node(*what_if, a.to_string().substr(0, 8));
    ASSERT_FALSE(ambiguous);
    EXPECT_NE(ambiguous.error().message.find("matches 2"), std::string::npos);
    ASSERT_TRUE(remove_node(*what_if, b.to_string()));
    ASSERT_EQ(what_if->request.nodes.size(), 1u);
    EXPECT_TRUE(what_if->request.links.empty());  // b's link went with it

    add_node(*what_if, "laptop", 30'000'000, 5e-4, 2.0);
    add_node(*what_if, "desk", 30'000'000, 5e-4, -1);
    ASSERT_EQ(what_if->request.nodes.size(), 3u);
    const auto laptop = what_if->request.nodes[1].id;
    EXPECT_NE(laptop, what_if->request.nodes[2].id);
    EXPECT_EQ(what_if->name_of(laptop), "laptop");
    ASSERT_EQ(what_if->request.links.size(), 1u);  // laptop to a; desk: the default
    EXPECT_DOUBLE_EQ(what_if->request.links[0].rtt_s, 0.002);
    auto plan = mesh::make_plan(what_if->request);
    ASSERT_TRUE(plan) << plan.error().message;
    EXPECT_EQ(plan->stages.size(), 1u);  // a faster node holds it all
    EXPECT_NE(plan->stages[0].node, a);

    EXPECT_FALSE(what_if_from_mesh(nlohmann::json::array(), shape()));
    // Figures out of range or of another type are left at the planner's defaults, nodes with an
    // unreadable capacity left out: never an exception.
    const nlohmann::json odd = {
        {"nodes",
         {{{"id", a.to_string()},
           {"state", "alive"},
           {"memory_bytes", -3},
           {"seconds_per_layer", 1e-3}},
          {{"id", b.to_string()},
           {"state", "alive"},
           {"memory_bytes", 1000},
           {"seconds_per_layer", "fast"}}}},
        {"links", {{{"from", 1}, {"to", nullptr}}, "not a link"}},
        {"planning",
         {{"context_tokens", -5}, {"expected_concurrency", "x"}, {"activation_bytes", 1e40}}}};
    auto defaults = what_if_from_mesh(odd, shape());
    ASSERT_TRUE(defaults) << defaults.error().message;
    EXPECT_TRUE(defaults->request.nodes.empty());
    EXPECT_TRUE(defaults->request.links.empty());
    EXPECT_EQ(defaults->request.context_tokens, mesh::PlanRequest{}.context_tokens);
    EXPECT_EQ(defaults->request.expected_concurrency, 1);
    EXPECT_EQ(defaults->request.activation_bytes, 2u);
    EXPECT_FALSE(what_if_from_mesh({{"nodes", {{{"id", "not an id"}}}}}, shape()));
}

}  // namespace
}  // namespace brigade::node
