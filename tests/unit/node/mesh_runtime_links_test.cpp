// MeshRuntime links: pipeline frames reach the peer's host in order and name the sender; a
// stranger with the wrong secret is refused and learns nothing; one link per pair.

#include <gtest/gtest.h>

#include "tests/unit/node/mesh_runtime_test_util.hpp"

namespace brigade::node::test {
namespace {

bool linked(TestNode& n, std::size_t n_nodes) {
    return n.runtime.status()["nodes"].size() == n_nodes;
}

TEST(MeshRuntimeLinks, PipelineFramesArriveInOrderFromTheirSender) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(64'000'000);
    o.seeds = {a.address()};
    TestNode b(mesh, o);
    ASSERT_TRUE(b.runtime.start(b.host));
    ASSERT_TRUE(wait_until([&] { return linked(a, 2) && linked(b, 2); }));

    // From several threads at once, as compute threads do; each thread's frames stay in order.
    constexpr int kThreads = 4;
    constexpr int kPerThread = 50;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                mesh::TokenFrame frame;
                frame.epoch = static_cast<std::uint64_t>(t);
                frame.batch_id = static_cast<std::uint64_t>(i);
                a.runtime.sender().send(b.runtime.self(), frame);
            }
        });
    }
    for (auto& t : threads) t.join();
    const mesh::Message cancel = mesh::Cancel{77, "client gone"};
    a.runtime.sender().send(b.runtime.self(), cancel);
    ASSERT_TRUE(wait_until([&] { return b.host.frames().size() == kThreads * kPerThread + 1; }))
        << b.host.frames().size();
    std::vector<std::uint64_t> next(kThreads, 0);
    for (const auto& [from, m] : b.host.frames()) {
        EXPECT_EQ(from, a.runtime.self());
        if (const auto* t = std::get_if<mesh::TokenFrame>(&m)) {
            EXPECT_EQ(t->batch_id, next[t->epoch]++);
        }
    }
    EXPECT_TRUE(std::holds_alternative<mesh::Cancel>(b.host.frames().back().second));
    // Frames to a node without a link are dropped, not queued forever.
    a.runtime.sender().send(mesh::NodeKey::generate().id(), cancel);
    b.runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimeLinks, WrongSecretIsRefusedAndTheMeshGoesOn) {
    const auto mesh = mesh::MeshCredentials::generate();
    auto stranger_mesh = mesh;
    stranger_mesh.secret[5] ^= 0x40;
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(64'000'000);
    o.seeds = {a.address()};
    TestNode stranger(stranger_mesh, o);
    ASSERT_TRUE(stranger.runtime.start(stranger.host));
    TestNode b(mesh, o);
    ASSERT_TRUE(b.runtime.start(b.host));

    ASSERT_TRUE(wait_until([&] { return linked(a, 2) && linked(b, 2); }));
    std::this_thread::sleep_for(500ms);  // the stranger keeps redialling meanwhile
    EXPECT_EQ(a.runtime.status()["nodes"].size(), 2u);
    EXPECT_EQ(stranger.runtime.status()["nodes"].size(), 1u);
    // The stranger plans alone (it holds the model); it never saw a frame of the mesh.
    EXPECT_TRUE(stranger.host.frames().empty());
    const nlohmann::json status = a.runtime.status();
    for (const auto& n : status["nodes"]) {
        EXPECT_NE(n["id"], stranger.runtime.self().to_string());
    }
    stranger.runtime.stop();
    b.runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimeLinks, BothSeedingEachOtherKeepsOneLink) {
    const auto mesh = mesh::MeshCredentials::generate();
    // Fixed ports chosen by the OS first, so each can name the other as a seed before starting.
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto ob = fast_options(64'000'000);
    ob.seeds = {a.address()};
    TestNode b(mesh, ob);
    ASSERT_TRUE(b.runtime.start(b.host));
    ASSERT_TRUE(wait_until([&] { return linked(a, 2) && linked(b, 2); }));
    auto oc = fast_options(64'000'000);
    oc.seeds = {a.address(), b.address()};
    TestNode c(mesh, oc);
    ASSERT_TRUE(c.runtime.start(c.host));
    ASSERT_TRUE(wait_until([&] { return linked(a, 3) && linked(b, 3) && linked(c, 3); }));
    std::this_thread::sleep_for(800ms);  // duplicates, if any, are resolved by now
    // Each node reports one link per peer, and frames still flow both ways.
    for (TestNode* n : {&a, &b, &c}) {
        std::size_t from_me = 0;
        const nlohmann::json status = n->runtime.status();
        for (const auto& l : status["links"]) {
            if (l["from"] == n->runtime.self().to_string()) ++from_me;
        }
        EXPECT_EQ(from_me, 2u);
    }
    const mesh::Message m = mesh::Cancel{1, ""};
    c.runtime.sender().send(a.runtime.self(), m);
    a.runtime.sender().send(c.runtime.self(), m);
    EXPECT_TRUE(wait_until([&] { return !a.host.frames().empty() && !c.host.frames().empty(); }));
    c.runtime.stop();
    b.runtime.stop();
    a.runtime.stop();
}

}  // namespace
}  // namespace brigade::node::test
