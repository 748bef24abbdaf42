// Nodes whose KV caches differ (one started with --kv-f32): every node reports its own KV bytes
// per token, and the plan sizes each stage with the bytes of the node that holds it. The demo
// model has 4 layers of 0.57 MB and a 1.57 MB embedding (tied: the tail holds it too); with
// --ctx 256 and one stream planned for, a layer's KV is 65.5 kB in f16 and 131 kB in f32.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/integration/elastic/elastic_mesh.hpp"

namespace brigade::test {
namespace {

std::string self_id(const NodeProcess& node) {
    const nlohmann::json view = mesh_view(node);
    if (view.is_object() && view.contains("nodes")) {
        for (const auto& n : view["nodes"]) {
            if (n["is_self"] == true) return n["id"].get<std::string>();
        }
    }
    return "";
}

TEST(ElasticKvDtype, AnF32CacheNodeIsGivenOnlyTheLayersItsMemoryHolds) {
    ElasticMesh mesh(elastic_spec("kvdt"));
    // Node a (f16): 3.5 MB holds 3 layers with their KV beside the embedding (3.47 MB), not 4
    // (4.10 MB). Node b (f32): 2.9 MB would hold 2 layers with f16 KV (2.84 MB) but holds only 1
    // with f32 KV (2.27 MB; 2 need 2.97 MB). So the only plan is 3 + 1, where sizing b's KV as
    // f16 would also allow 2 + 2.
    NodeProcess* a = mesh.add_node("3.5MB", 2);
    ASSERT_NE(a, nullptr) << mesh.error();
    NodeProcess* b = mesh.add_node("2.9MB", 2, std::nullopt, {"--kv-f32"});
    ASSERT_NE(b, nullptr) << mesh.error();
    ASSERT_EQ(mesh.wait_plan(2, 2), "");

    const nlohmann::json& view = mesh.view();
    std::map<std::string, std::uint64_t> kv_bytes;
    for (const auto& n : view["nodes"]) {
        kv_bytes[n["id"].get<std::string>()] = n["kv_bytes_per_token_per_layer"];
    }
    const std::string a_id = self_id(*a);
    const std::string b_id = self_id(*b);
    ASSERT_FALSE(a_id.empty() || b_id.empty()) << view.dump();
    ASSERT_EQ(kv_bytes.size(), 2u) << view.dump();
    EXPECT_GT(kv_bytes[a_id], 0u) << view.dump();
    EXPECT_EQ(kv_bytes[b_id], 2 * kv_bytes[a_id]) << view.dump();

    std::map<std::string, int> layers;
    for (const auto& s : view["plan"]["stages"]) {
        layers[s["node"].get<std::string>()] =
            s["last_layer"].get<int>() - s["first_layer"].get<int>();
    }
    EXPECT_EQ(layers[b_id], 1) << view.dump() << "\n" << mesh.logs();
    EXPECT_EQ(layers[a_id], 3) << view.dump();

    // The mesh serves through the split.
    auto r = a->post("/v1/completions", completion_body(demo_chat_prompt(kShortUsers[0]), 4));
    EXPECT_EQ(r.status, 200) << r.body << "\n" << mesh.logs();
}

}  // namespace
}  // namespace brigade::test
