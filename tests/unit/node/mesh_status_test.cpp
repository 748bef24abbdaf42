// The /v1/mesh document from a fixed snapshot: field names and types as api/README.md states,
// nodes and links sorted, stage timings only from reports of the plan's epoch.

#include "node/mesh_status.hpp"

#include <gtest/gtest.h>

namespace brigade::node {
namespace {

using nlohmann::json;

mesh::NodeId id_of(std::uint8_t first) {
    mesh::NodeId id;
    id.bytes[0] = first;
    return id;
}

TEST(MeshStatusJson, NodesPlanAndLinks) {
    const mesh::NodeId a = id_of(1), b = id_of(2);
    MeshStatusInput in;
    in.mesh_id.bytes[15] = 0xab;
    in.self = b;
    in.coordinator = a;
    in.model = "demo";
    MeshStatusNode nb{b, {{"127.0.0.1", 9001}}, false, std::nullopt};
    nb.capacity = mesh::CapacityReport{b, 4'000'000, "cpu", "demo", 2e-5, {}, {}};
    nb.capacity->links = {{a, 250, 0}};
    nb.capacity->stage = {7, 10, 40, 1500};  // epoch 7: the plan's
    MeshStatusNode na{a, {{"10.0.0.1", 8178}, {"127.0.0.1", 8178}}, true, std::nullopt};
    na.capacity = mesh::CapacityReport{a, 3'000'000, "cpu", "demo", 3e-5, {}, {}};
    na.capacity->links = {{b, 0, 0}};      // not measured yet
    na.capacity->stage = {6, 99, 99, 99};  // an older plan's timings: not shown
    in.nodes = {nb, na};                   // out of order on purpose
    in.plan = mesh::PlanPropose{7, a, "demo", {{a, 0, 2}, {b, 2, 4}}, 123.5};

    const json s = mesh_status_json(in);
    EXPECT_EQ(s["mesh_id"], in.mesh_id.to_string());
    EXPECT_EQ(s["self"], b.to_string());
    EXPECT_EQ(s["coordinator"], a.to_string());
    EXPECT_EQ(s["epoch"], 7);
    EXPECT_EQ(s["model"], "demo");
    ASSERT_EQ(s["nodes"].size(), 2u);
    EXPECT_EQ(s["nodes"][0]["id"], a.to_string());
    EXPECT_EQ(s["nodes"][0]["state"], "suspect");
    EXPECT_EQ(s["nodes"][0]["is_self"], false);
    EXPECT_EQ(s["nodes"][0]["addresses"], json({"10.0.0.1:8178", "127.0.0.1:8178"}));
    EXPECT_EQ(s["nodes"][0]["memory_bytes"], 3'000'000u);
    EXPECT_EQ(s["nodes"][1]["state"], "alive");
    EXPECT_EQ(s["nodes"][1]["is_self"], true);
    EXPECT_DOUBLE_EQ(s["nodes"][1]["seconds_per_layer"].get<double>(), 2e-5);
    EXPECT_EQ(s["nodes"][1]["backend"], "cpu");

    EXPECT_EQ(s["plan"]["epoch"], 7);
    EXPECT_DOUBLE_EQ(s["plan"]["predicted_tok_s"].get<double>(), 123.5);
    ASSERT_EQ(s["plan"]["stages"].size(), 2u);
    EXPECT_EQ(s["plan"]["stages"][0], json({{"node", a.to_string()},
                                            {"first_layer", 0},
                                            {"last_layer", 2},
                                            {"steps", 0},
                                            {"tokens", 0},
                                            {"mean_step_ms", 0.0}}));
    EXPECT_EQ(s["plan"]["stages"][1]["steps"], 10);
    EXPECT_EQ(s["plan"]["stages"][1]["tokens"], 40);
    EXPECT_DOUBLE_EQ(s["plan"]["stages"][1]["mean_step_ms"].get<double>(), 1.5);

    ASSERT_EQ(s["links"].size(), 2u);
    EXPECT_EQ(s["links"][0], json({{"from", a.to_string()},
                                   {"to", b.to_string()},
                                   {"rtt_ms", nullptr},
                                   {"bandwidth_bytes_per_s", 0.0}}));
    EXPECT_EQ(s["links"][1]["from"], b.to_string());
    EXPECT_DOUBLE_EQ(s["links"][1]["rtt_ms"].get<double>(), 0.25);
    EXPECT_TRUE(s["unavailable"].is_null());
    EXPECT_EQ(s["planning"],
              json({{"context_tokens", 0}, {"expected_concurrency", 1}, {"activation_bytes", 2}}));
}

TEST(MeshStatusJson, NoPlanSaysWhy) {
    MeshStatusInput in;
    in.self = in.coordinator = id_of(3);
    in.nodes = {MeshStatusNode{id_of(3), {}, false, std::nullopt}};
    in.unavailable = "the mesh cannot hold the model: needs 5 MB";
    const json s = mesh_status_json(in);
    EXPECT_TRUE(s["plan"].is_null());
    EXPECT_EQ(s["epoch"], 0);
    EXPECT_EQ(s["unavailable"], "the mesh cannot hold the model: needs 5 MB");
    // A node whose capacity has not arrived still lists, with zeros.
    EXPECT_EQ(s["nodes"][0]["memory_bytes"], 0);
    EXPECT_EQ(s["nodes"][0]["backend"], "");
    EXPECT_TRUE(s["links"].empty());
}

}  // namespace
}  // namespace brigade::node
