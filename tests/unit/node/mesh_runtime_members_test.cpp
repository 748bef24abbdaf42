// MeshRuntime membership: a member that goes silent is suspect then dead, a coordinator that
// leaves is replaced with a higher epoch, and a peer that breaks the protocol loses its link
// while the mesh goes on. A hand-driven link (the test's own io_context) plays the odd peer.

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>
#include <random>

#include "tests/unit/node/mesh_runtime_test_util.hpp"

namespace brigade::node::test {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

bool has_node(MeshRuntime& r, const mesh::NodeId& id, const char* state = nullptr) {
    const json s = r.status();
    for (const auto& n : s["nodes"]) {
        if (n["id"] == id.to_string()) return state == nullptr || n["state"] == state;
    }
    return false;
}

// A hand-driven peer that says it listens at `listen_port` reports its capacity to `a`, then
// drops its link: its io_context goes away, and the link's teardown says Bye "link released"
// (not "leaving", so it counts as a crash).
void link_then_vanish(TestNode& a, const mesh::MeshCredentials& mesh, const mesh::NodeKey& peer,
                      std::uint16_t listen_port) {
    run_coroutine([&](asio::io_context& io) -> asio::awaitable<void> {
        const std::shared_ptr<mesh::Link> link = co_await hand_link(a, peer, mesh, listen_port);
        if (!link) co_return;
        const mesh::Message capacity = small_capacity_of(peer);
        co_await link->async_send(capacity);
        for (int i = 0; i < 100 && !has_node(a.runtime, peer.id(), "alive"); ++i) {
            co_await pause(io, 20ms);
        }
        EXPECT_TRUE(has_node(a.runtime, peer.id(), "alive")) << a.runtime.status().dump(1);
    });
}

// A peer whose link drops and whose port is unknown (none in its Hello): only the timeouts tell.
TEST(MeshRuntimeMembers, ASilentPeerIsSuspectThenDead) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    const mesh::NodeKey peer = mesh::NodeKey::generate();
    link_then_vanish(a, mesh, peer, /*listen_port=*/0);
    ASSERT_TRUE(wait_until([&] { return has_node(a.runtime, peer.id(), "suspect"); }, 3s))
        << a.runtime.status().dump(1);
    ASSERT_TRUE(wait_until([&] { return !has_node(a.runtime, peer.id()); }, 4s));
    const auto gone = a.host.gone();
    EXPECT_NE(std::find(gone.begin(), gone.end(), peer.id()), gone.end());
    a.runtime.stop();
}

TEST(MeshRuntimeMembers, ABrokenRuleClosesOnlyThatLink) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, fast_options(64'000'000));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(64'000'000);
    o.seeds = {a.address()};
    TestNode b(mesh, o);
    ASSERT_TRUE(b.runtime.start(b.host));
    ASSERT_TRUE(wait_until([&] { return has_node(a.runtime, b.runtime.self()); }));
    const mesh::NodeKey liar = mesh::NodeKey::generate();
    run_coroutine([&](asio::io_context&) -> asio::awaitable<void> {
        const mesh::LinkConfig config;
        const mesh::PeerAddress where = a.address();
        auto link = co_await mesh::async_connect_link(where, liar, mesh, config);
        EXPECT_TRUE(link) << link.error().what();
        if (!link) co_return;
        // A capacity report in another node's name.
        const mesh::Message forged =
            mesh::CapacityReport{b.runtime.self(), 1, "cpu", "fake-model", 9.0, {}, {}};
        co_await (*link)->async_send(forged);
        for (;;) {
            auto m = co_await (*link)->async_receive(5s);
            if (!m) {
                EXPECT_NE(m.error().message.find("protocol error"), std::string::npos)
                    << m.error().what();
                break;
            }
        }
    });
    // b's real capacity stands and a and b still talk.
    const json s = a.runtime.status();
    for (const auto& n : s["nodes"]) {
        if (n["id"] == b.runtime.self().to_string()) {
            EXPECT_EQ(n["memory_bytes"], 64'000'000u);
        }
    }
    const mesh::Message m = mesh::Cancel{5, ""};
    b.runtime.sender().send(a.runtime.self(), m);
    EXPECT_TRUE(wait_until([&] { return !a.host.frames().empty(); }));
    b.runtime.stop();
    a.runtime.stop();
}

TEST(MeshRuntimeMembers, TheNextCoordinatorTakesOverWithAHigherEpoch) {
    const auto mesh = mesh::MeshCredentials::generate();
    // Three nodes, each able to hold the model: the plan is one stage; stopping the coordinator
    // makes the next lowest id coordinator, which re-plans above the old epoch if needed.
    std::vector<mesh::NodeKey> keys = keys_by_id(3);
    const mesh::NodeId lowest = keys[0].id();
    auto first = std::make_unique<TestNode>(mesh, fast_options(64'000'000), std::move(keys[0]));
    ASSERT_TRUE(first->runtime.start(first->host));
    auto o = fast_options(64'000'000);
    o.seeds = {first->address()};
    TestNode b(mesh, o, std::move(keys[1]));
    ASSERT_TRUE(b.runtime.start(b.host));
    TestNode c(mesh, o, std::move(keys[2]));
    ASSERT_TRUE(c.runtime.start(c.host));
    ASSERT_TRUE(wait_until([&] {
        auto rb = b.host.route();
        auto rc = c.host.route();
        auto ra = first->host.route();
        return ra && rb && rc && ra->epoch == rb->epoch && rb->epoch == rc->epoch &&
               has_node(b.runtime, c.runtime.self());
    })) << b.runtime.status().dump(1);
    EXPECT_EQ(b.runtime.status()["coordinator"], lowest.to_string());
    const std::uint64_t before = b.host.route()->epoch;
    const bool stage_was_lowest = b.host.route()->stages[0].node == lowest;
    first->runtime.stop();
    ASSERT_TRUE(wait_until(
        [&] { return b.runtime.status()["coordinator"] == b.runtime.self().to_string(); }));
    EXPECT_EQ(c.runtime.status()["coordinator"], b.runtime.self().to_string());
    if (stage_was_lowest) {
        // Its stage is gone: the new coordinator plans again, above the old epoch.
        ASSERT_TRUE(wait_until([&] {
            auto rb = b.host.route();
            auto rc = c.host.route();
            return rb && rc && rb->epoch > before && rb->epoch == rc->epoch;
        })) << b.runtime.status().dump(1);
    } else {
        // The plan did not involve it: it stays.
        std::this_thread::sleep_for(500ms);
        ASSERT_TRUE(b.host.route().has_value());
        EXPECT_EQ(b.host.route()->epoch, before);
    }
    c.runtime.stop();
    b.runtime.stop();
}

// A coordinator that stops and starts again knows no epoch. If its stage was needed, the others
// stopped serving when it left, so their capacity reports name no epoch either: its first
// proposal (epoch 1) is refused as stale by each of them. The first refusal asks for a proposal
// above it at once; the later ones used to be taken for a joiner refusing the committed plan,
// which put that proposal off by the retry delay (1.5 s; here a minute, so it would show).
TEST(MeshRuntimeMembers, ARestartedCoordinatorRefusedAsStaleProposesAgainAtOnce) {
    const auto mesh = mesh::MeshCredentials::generate();
    // Seeds, so that the coordinator's key can be made again for its second run.
    std::vector<std::array<std::uint8_t, 32>> seeds(3);
    std::mt19937 rng(std::random_device{}());
    for (auto& seed : seeds) {
        for (auto& byte : seed) byte = static_cast<std::uint8_t>(rng());
    }
    std::sort(seeds.begin(), seeds.end(), [](const auto& x, const auto& y) {
        return mesh::NodeKey::from_seed(x).id() < mesh::NodeKey::from_seed(y).id();
    });
    std::vector<mesh::NodeKey> keys;
    for (const auto& seed : seeds) keys.push_back(mesh::NodeKey::from_seed(seed));
    // 2.2 MB each: the ~5 MB model needs all three.
    auto first = std::make_unique<TestNode>(mesh, fast_options(2'200'000), std::move(keys[0]));
    ASSERT_TRUE(first->runtime.start(first->host));
    auto o = fast_options(2'200'000);
    o.seeds = {first->address()};
    TestNode b(mesh, o, std::move(keys[1]));
    ASSERT_TRUE(b.runtime.start(b.host));
    TestNode c(mesh, o, std::move(keys[2]));
    ASSERT_TRUE(c.runtime.start(c.host));
    ASSERT_TRUE(wait_until([&] {
        auto ra = first->host.route();
        auto rb = b.host.route();
        auto rc = c.host.route();
        return ra && rb && rc && rb->stages.size() == 3 && ra->epoch == rb->epoch &&
               rb->epoch == rc->epoch;
    })) << b.runtime.status().dump(1);
    const std::uint64_t before = b.host.route()->epoch;
    first->runtime.stop();
    first.reset();
    // Without it the model fits nowhere: the others stop serving.
    ASSERT_TRUE(wait_until([&] { return !b.host.route() && !c.host.route(); }))
        << b.runtime.status().dump(1);
    auto again = fast_options(2'200'000);
    again.seeds = {b.address()};
    again.plan_retry = 60s;
    TestNode restarted(mesh, again, mesh::NodeKey::from_seed(seeds[0]));
    ASSERT_TRUE(restarted.runtime.start(restarted.host));
    EXPECT_TRUE(wait_until([&] {
        auto ra = restarted.host.route();
        auto rb = b.host.route();
        auto rc = c.host.route();
        return ra && rb && rc && rb->epoch > before && ra->epoch == rb->epoch &&
               rb->epoch == rc->epoch;
    })) << restarted.runtime.status().dump(1);
    restarted.runtime.stop();
    c.runtime.stop();
    b.runtime.stop();
}

// A stage node that leaves while a proposal naming it is in flight (here, still loading) aborts
// it. The members already show it gone, so the coordinator proposes again at once instead of
// after the retry delay (here a minute, so that a wait would show).
TEST(MeshRuntimeMembers, AStageNodeThatLeavesDuringAProposalIsPlannedAroundAtOnce) {
    const auto mesh = mesh::MeshCredentials::generate();
    std::vector<mesh::NodeKey> keys = keys_by_id(3);
    // 3 MB each: any two hold the ~5 MB model, one alone does not.
    auto coordinator_options = fast_options(3'000'000);
    coordinator_options.plan_retry = 60s;
    TestNode a(mesh, coordinator_options, std::move(keys[0]));
    ASSERT_TRUE(a.runtime.start(a.host));
    auto o = fast_options(3'000'000);
    o.seeds = {a.address()};
    auto slow = std::make_unique<TestNode>(mesh, o, std::move(keys[1]));
    slow->host.load_ms = 3000;
    ASSERT_TRUE(slow->runtime.start(slow->host));
    // The first plan (a and the slow node) is in flight while the slow node loads.
    ASSERT_TRUE(wait_until([&] { return slow->host.loads_started.load() > 0; }))
        << a.runtime.status().dump(1);
    const mesh::NodeId slow_id = slow->runtime.self();
    TestNode c(mesh, o, std::move(keys[2]));
    ASSERT_TRUE(c.runtime.start(c.host));
    ASSERT_TRUE(wait_until([&] { return has_node(a.runtime, c.runtime.self()); }));
    EXPECT_FALSE(a.host.route().has_value());
    slow->runtime.stop();  // says goodbye: gone at once
    EXPECT_TRUE(wait_until([&] {
        auto ra = a.host.route();
        auto rc = c.host.route();
        if (!ra || !rc || ra->epoch != rc->epoch) return false;
        for (const auto& s : ra->stages) {
            if (s.node == slow_id) return false;
        }
        return true;
    })) << a.runtime.status().dump(1);
    slow.reset();
    c.runtime.stop();
    a.runtime.stop();
}

// Membership's timeouts here: 5 s to suspect, 30 s to dead. Only the refused dial can remove
// the member within seconds.
MeshRuntimeOptions slow_to_suspect() {
    MeshRuntimeOptions o = fast_options(64'000'000);
    o.membership.suspect_after = 5s;
    o.membership.dead_after = 30s;
    return o;
}

// A crash or kill -9 on a host that stays up: the link drops without a Bye, and the port the
// peer listened at, which took this node's connect while the peer lived, refuses connections.
// Taken as gone at once rather than after the suspect and dead times (soak: 1.6 s from a kill
// -9 to the plan without the node, at a 0.5 s suspect time; 2.5 s more by default).
TEST(MeshRuntimeMembers, AMemberWhoseLinkDropsAndWhosePortRefusesIsGoneAtOnce) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, slow_to_suspect());
    ASSERT_TRUE(a.runtime.start(a.host));
    const mesh::NodeKey peer = mesh::NodeKey::generate();
    run_coroutine([&](asio::io_context& io) -> asio::awaitable<void> {
        asio::ip::tcp::acceptor listening(io, {asio::ip::make_address("127.0.0.1"), 0});
        const std::shared_ptr<mesh::Link> link =
            co_await hand_link(a, peer, mesh, listening.local_endpoint().port());
        if (!link) co_return;
        const mesh::Message capacity = small_capacity_of(peer);
        co_await link->async_send(capacity);
        // a checks that it can connect where the peer says it listens.
        asio::steady_timer limit(io, 5s);
        limit.async_wait([&](boost::system::error_code) { listening.close(); });
        auto probe = co_await listening.async_accept(asio::as_tuple(asio::use_awaitable));
        EXPECT_FALSE(std::get<0>(probe)) << "a never connected to the peer's port";
        limit.cancel();
        for (int i = 0; i < 100 && !has_node(a.runtime, peer.id(), "alive"); ++i) {
            co_await pause(io, 20ms);
        }
        EXPECT_TRUE(has_node(a.runtime, peer.id(), "alive")) << a.runtime.status().dump(1);
        listening.close();  // the process dies: its port first, then its link
    });
    ASSERT_TRUE(wait_until([&] { return !has_node(a.runtime, peer.id()); }, 3s))
        << a.runtime.status().dump(1);
    const auto gone = a.host.gone();
    EXPECT_NE(std::find(gone.begin(), gone.end(), peer.id()), gone.end());
    a.runtime.stop();
}

// A peer behind a firewall that rejects inbound connections (an iptables REJECT rule) answers
// "refused" while it lives. Its port never took this node's connect, so a refusal proves
// nothing there: a blip of its link is left to the timeouts, not taken for a crash.
TEST(MeshRuntimeMembers, APeerWhosePortNeverTookOurConnectIsNotTakenForGoneWhenItRefuses) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, slow_to_suspect());
    ASSERT_TRUE(a.runtime.start(a.host));
    const mesh::NodeKey peer = mesh::NodeKey::generate();
    link_then_vanish(a, mesh, peer, closed_port());
    std::this_thread::sleep_for(2s);
    EXPECT_TRUE(has_node(a.runtime, peer.id())) << a.runtime.status().dump(1);
    a.runtime.stop();
}

// The same drop where something still listens (the link broke, the process lives, or it hangs
// with its socket open): no verdict from the dial, the member stays until its timeouts.
TEST(MeshRuntimeMembers, AMemberWhosePortStillAnswersIsLeftToItsTimeouts) {
    const auto mesh = mesh::MeshCredentials::generate();
    TestNode a(mesh, slow_to_suspect());
    ASSERT_TRUE(a.runtime.start(a.host));
    asio::io_context io;
    asio::ip::tcp::acceptor still_listening(io, {asio::ip::make_address("127.0.0.1"), 0});
    const mesh::NodeKey peer = mesh::NodeKey::generate();
    link_then_vanish(a, mesh, peer, still_listening.local_endpoint().port());
    std::this_thread::sleep_for(2s);
    EXPECT_TRUE(has_node(a.runtime, peer.id())) << a.runtime.status().dump(1);
    a.runtime.stop();
}

// A peer that hangs with its link open: no bytes come, the socket stays. It is suspect once it
// has been silent for the suspect time, not only that long after its link timed out (the link's
// idle timeout is the suspect time too: counted from the link's closing, the two added up).
TEST(MeshRuntimeMembers, AHungPeerIsSuspectOnceSilentForTheSuspectTime) {
    const auto mesh = mesh::MeshCredentials::generate();
    MeshRuntimeOptions o = fast_options(64'000'000);
    o.membership.suspect_after = 3s;
    o.membership.dead_after = 30s;
    TestNode a(mesh, o);
    ASSERT_TRUE(a.runtime.start(a.host));
    const mesh::NodeKey peer = mesh::NodeKey::generate();
    asio::io_context io;
    std::shared_ptr<mesh::Link> link;
    bool reported = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            link = co_await hand_link(a, peer, mesh, 0);
            if (!link) co_return;
            const mesh::Message capacity = small_capacity_of(peer);
            co_await link->async_send(capacity);
            reported = true;
        },
        asio::detached);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!(reported && has_node(a.runtime, peer.id(), "alive")) &&
           std::chrono::steady_clock::now() < deadline) {
        io.run_for(20ms);
    }
    ASSERT_TRUE(has_node(a.runtime, peer.id(), "alive")) << a.runtime.status().dump(1);
    // The hang: nothing runs the peer's io_context from now on.
    const auto hung_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(wait_until([&] { return has_node(a.runtime, peer.id(), "suspect"); }, 10s));
    const auto suspect_after = std::chrono::steady_clock::now() - hung_at;
    // 3 s of silence (plus a tick); counted from the link's idle timeout it would be 6 s.
    EXPECT_LT(suspect_after, 4500ms);
    a.runtime.stop();
}

// A member whose keepalives come late (every 700 ms, say its thread is busy) but within what
// its link tolerates (3 keepalive intervals of 300 ms) is not suspected in the gaps, though the
// suspect time is 300 ms. (The soak, with 500 ms for both, saw members flap suspect and back,
// and plans with them, while a node loaded a stage.)
TEST(MeshRuntimeMembers, AMemberIsNotSuspectedWhileItsLinkToleratesItsSilence) {
    const auto mesh = mesh::MeshCredentials::generate();
    MeshRuntimeOptions o = fast_options(64'000'000);
    o.membership.suspect_after = 300ms;
    o.membership.dead_after = 5s;
    o.keepalive_interval = 300ms;
    TestNode a(mesh, o);
    ASSERT_TRUE(a.runtime.start(a.host));
    const mesh::NodeKey peer = mesh::NodeKey::generate();
    run_coroutine([&](asio::io_context& io) -> asio::awaitable<void> {
        const std::shared_ptr<mesh::Link> link = co_await hand_link(a, peer, mesh, 0, 700ms);
        if (!link) co_return;
        const mesh::Message capacity = small_capacity_of(peer);
        co_await link->async_send(capacity);
        bool suspected = false;
        const auto until = std::chrono::steady_clock::now() + 3s;
        while (std::chrono::steady_clock::now() < until && !suspected) {
            suspected = has_node(a.runtime, peer.id(), "suspect");
            co_await pause(io, 10ms);
        }
        EXPECT_FALSE(suspected) << a.runtime.status().dump(1);
        EXPECT_TRUE(has_node(a.runtime, peer.id(), "alive"));
        link->close("done");
    });
    a.runtime.stop();
}

}  // namespace
}  // namespace brigade::node::test
