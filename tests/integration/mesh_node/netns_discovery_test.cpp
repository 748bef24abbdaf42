// Three nodes in three network namespaces on one bridge find each other by multicast beacons
// alone (no --peer, and an invite token without addresses), form one mesh and serve. The test
// builds the namespaces, veth pairs and bridge itself (needs root; skips, saying why, where
// `ip netns add` fails) on a private 10.77.x.0/24 and removes all of it at the end, also when
// the test fails.
#include <gtest/gtest.h>

#include "mesh/identity.hpp"
#include "tests/integration/mesh_node/mesh_cluster.hpp"
#include "tests/integration/mesh_node/pipeline_compare.hpp"
#include "tests/support/netns_lan.hpp"

namespace brigade::test {
namespace {

TEST(NetnsDiscovery, ThreeNamespacesFindEachOtherFormOneMeshAndServe) {
    NetnsLan lan(3, "bm", 77);
    if (!lan.skip_reason().empty()) GTEST_SKIP() << lan.skip_reason();
    ASSERT_TRUE(lan.ok()) << lan.error();

    // The mesh exists before any node runs; its token carries no addresses, so only beacons
    // can tell the nodes where the others are.
    TempDir homes;
    const auto founder_home = homes.path() / "founder";
    std::filesystem::create_directories(founder_home);
    auto token = run_brigade_env({"mesh", "token"}, {{"BRIGADE_HOME", founder_home.string()}});
    ASSERT_EQ(token.exit_code, 0) << token.err;
    while (!token.out.empty() && token.out.back() == '\n') token.out.pop_back();
    const auto decoded = mesh::decode_invite_token(token.out);
    ASSERT_TRUE(decoded) << token.out;
    ASSERT_TRUE(decoded->addresses.empty()) << "the token would tell where the founder is";

    std::vector<std::unique_ptr<NodeProcess>> nodes;
    for (std::size_t i = 0; i < 3; ++i) {
        NodeSpec spec;
        spec.name = "ns" + std::to_string(i + 1);
        spec.netns = lan.ns(i);
        spec.http_host = lan.address(i);
        spec.mesh_port_file = false;  // the default mesh port: each namespace has its own
        spec.serve_args = {"--model",
                           demo_model_dir().string(),
                           "--threads",
                           "1",
                           "--ctx",
                           "256",
                           "--max-concurrency",
                           "4",
                           "--memory",
                           "2.6MB",
                           "--activations",
                           "f32",
                           "--expect-nodes",
                           "3"};
        if (i == 0) {
            spec.home = founder_home;
        } else {
            spec.serve_args.insert(spec.serve_args.end(), {"--join", token.out});
        }
        nodes.push_back(std::make_unique<NodeProcess>(spec));
        ASSERT_TRUE(nodes.back()->ready()) << nodes.back()->why();
    }
    std::vector<NodeProcess*> all;
    for (auto& n : nodes) all.push_back(n.get());
    std::string why;
    const auto views = wait_for_common_plan(all, 3, 3, Millis(60'000), why);
    std::string logs;
    for (auto& n : nodes) logs += n->logs(3000);
    ASSERT_FALSE(views.empty()) << why << "\n" << logs;
    // Each node reached the others at their namespace addresses.
    for (const auto& n : views[0]["nodes"]) {
        const auto addresses = n["addresses"].dump();
        EXPECT_NE(addresses.find(lan.address(0).substr(0, 8)), std::string::npos) << n.dump();
    }
    const auto prompt = demo_chat_prompt("Where do birds live?");
    const auto& ref = cached_reference(demo_model_dir(), prompt, 24, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    for (auto& n : nodes) {
        expect_exact(n->post("/v1/completions", completion_body(prompt, 24, 1)), ref,
                     "entered at " + n->name());
    }
}

}  // namespace
}  // namespace brigade::test
