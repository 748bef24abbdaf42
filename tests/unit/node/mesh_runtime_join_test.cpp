// MeshRuntime joining a running mesh: a starting node that has linked to part of the mesh does
// not answer "no fit" (and announce itself ready) while the rest is a link away, and a peer whose
// earlier runs' ports are still gossiped is reached at its current one without a backoff step per
// stale port. Both were found by session 38's 6-minute soak (120 of 15,035 requests failed with
// 503 at nodes that had just restarted). A hand-driven link plays the peer that gossips.

#include <gtest/gtest.h>

#include "tests/unit/node/mesh_runtime_test_util.hpp"

namespace brigade::node::test {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

// Polls `condition` between pauses on `io` (so the hand-driven link keeps running).
asio::awaitable<bool> eventually(asio::io_context& io, std::function<bool()> condition,
                                 std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition()) co_return true;
        co_await pause(io, 20ms);
    }
    co_return condition();
}

bool contains(const std::string& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

// A peer offering 2 MB that reports a link to `unseen`, a node the tested node has no link to.
mesh::CapacityReport report_linked_to(const mesh::NodeKey& self, const mesh::NodeId& unseen) {
    mesh::CapacityReport report;
    report.node_id = self.id();
    report.memory_bytes = 2'000'000;
    report.backend = "cpu";
    report.model_id = "fake-model";
    report.seconds_per_layer = 0.001;
    report.links.push_back(mesh::LinkMeasurement{unseen, 300, 0});
    return report;
}

// The tested node offers 2 MB: with the hand-driven peer's 2 MB, 4 MB of the ~5 MB the model
// needs. What it knows of the mesh beyond that peer decides between "no fit" and waiting.
MeshRuntimeOptions joining_node_options(std::chrono::milliseconds partial_view_limit) {
    MeshRuntimeOptions o = fast_options(2'000'000);
    o.mesh_settle_limit = 300ms;
    o.partial_view_limit = partial_view_limit;
    return o;
}

// Starts a joiner (that gives up waiting after `partial_view_limit`) and links a hand-driven
// member to it that reports a link to a node the joiner has none with; once the joiner holds
// its "no fit" back, `then` goes on with the member's link and its report.
using AfterHold = std::function<asio::awaitable<void>(
    asio::io_context&, TestNode& joiner, mesh::Link& link, mesh::CapacityReport& report)>;
void hold_a_joiner_back(std::chrono::milliseconds partial_view_limit, const AfterHold& then) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode joiner(mesh, joining_node_options(partial_view_limit));
    ASSERT_TRUE(joiner.runtime.start(joiner.host));
    const mesh::NodeKey member = mesh::NodeKey::generate();
    const mesh::NodeId unseen = mesh::NodeKey::generate().id();
    run_coroutine([&](asio::io_context& io) -> asio::awaitable<void> {
        const std::shared_ptr<mesh::Link> link = co_await hand_link(joiner, member, mesh, 0);
        if (!link) co_return;
        mesh::CapacityReport report = report_linked_to(member, unseen);
        const mesh::Message linked_to_unseen = report;
        co_await link->async_send(linked_to_unseen);
        // Past the settle limit the joiner plans, finds no fit over the two nodes it knows,
        // and holds that back: requests wait as while the mesh forms, and it is not ready.
        const bool holding = co_await eventually(
            io, [&] { return contains(joiner.host.why(), "linking to 1 more node"); });
        EXPECT_TRUE(holding) << joiner.host.why();
        EXPECT_TRUE(joiner.host.plan_expected());
        EXPECT_FALSE(joiner.runtime.settled());
        EXPECT_TRUE(contains(joiner.runtime.status()["unavailable"].get<std::string>(),
                             "linking to 1 more node"));
        co_await then(io, joiner, *link, report);
        // Either way it ends with the answer over the nodes it has.
        EXPECT_TRUE(contains(joiner.host.why(), "cannot hold the model")) << joiner.host.why();
        EXPECT_FALSE(joiner.host.plan_expected());
        link->close("done");
    });
    joiner.runtime.stop();
}

TEST(MeshRuntimeJoin, AStartingNodeWaitsForTheNodesItsMembersLinkToBeforeFindingNoFit) {
    hold_a_joiner_back(60s,
                       [](asio::io_context& io, TestNode& joiner, mesh::Link& link,
                          mesh::CapacityReport& report) -> asio::awaitable<void> {
                           // The member's next report names no other node: the view is whole, and
                           // "no fit" is the answer at once (long before the 60 s limit).
                           report.links.clear();
                           const mesh::Message linked_to_none = report;
                           co_await link.async_send(linked_to_none);
                           const bool settled =
                               co_await eventually(io, [&] { return joiner.runtime.settled(); });
                           EXPECT_TRUE(settled);
                       });
}

TEST(MeshRuntimeJoin, ANodeItCannotLinkToIsPlannedWithoutAfterTheLimit) {
    hold_a_joiner_back(1500ms,
                       [](asio::io_context& io, TestNode& joiner, mesh::Link&,
                          mesh::CapacityReport&) -> asio::awaitable<void> {
                           // The unseen node never links: after the limit the joiner answers with
                           // what it has.
                           const bool settled =
                               co_await eventually(io, [&] { return joiner.runtime.settled(); });
                           EXPECT_TRUE(settled);
                       });
}

TEST(MeshRuntimeJoin, APeerIsReachedPastThePortsOfItsEarlierRuns) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode restarted(mesh, fast_options(64'000'000));
    ASSERT_TRUE(restarted.runtime.start(restarted.host));
    // A backoff step per stale port would take 2 + 4 + 8 + 10 + 10 s before the current one.
    MeshRuntimeOptions o = fast_options(64'000'000);
    o.redial_min = 2s;
    o.redial_max = 10s;
    TestNode dialler(mesh, o);
    ASSERT_TRUE(dialler.runtime.start(dialler.host));
    const mesh::NodeKey gossiper = mesh::NodeKey::generate();
    run_coroutine([&](asio::io_context& io) -> asio::awaitable<void> {
        const std::shared_ptr<mesh::Link> link = co_await hand_link(dialler, gossiper, mesh, 0);
        if (!link) co_return;
        // What a third node may know of a node that restarted: its earlier runs' ports first.
        mesh::PeerInfo entry{restarted.runtime.self(), {}};
        for (int i = 0; i < 5; ++i) entry.addresses.push_back({"127.0.0.1", closed_port()});
        entry.addresses.push_back(restarted.address());
        const mesh::Message gossip = mesh::PeerList{{entry}};
        co_await link->async_send(gossip);
        // The dial grace (1.5 s, should the dialler have the higher id), then one refused
        // connect per stale port.
        const bool linked = co_await eventually(
            io,
            [&] {
                const json status = dialler.runtime.status();
                for (const auto& n : status["nodes"]) {
                    if (n["id"] == restarted.runtime.self().to_string()) return true;
                }
                return false;
            },
            6s);
        EXPECT_TRUE(linked) << dialler.runtime.status().dump(1);
        link->close("done");
    });
    dialler.runtime.stop();
    restarted.runtime.stop();
}

}  // namespace
}  // namespace brigade::node::test
