// UDP multicast beacons on loopback: nodes of one mesh find each other, another mesh's beacons
// are ignored. Skips (saying why) where the sandbox has no multicast route.

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "mesh/multicast_beacon.hpp"
#include "tests/integration/mesh/mesh_test_util.hpp"

namespace brigade::mesh {
namespace {

using namespace std::chrono_literals;
using test::run_io;
using test::sleep_for;
namespace asio = boost::asio;

MulticastBeacon::Config beacon_config(std::uint16_t port) {
    MulticastBeacon::Config c;
    c.port = port;
    c.interface_address = "127.0.0.1";
    c.interval = 100ms;
    return c;
}

TEST(MulticastDiscovery, NodesOfOneMeshFindEachOtherOnLoopback) {
    asio::io_context io;
    // A port of our own so parallel test runs do not hear each other.
    const std::uint16_t port = static_cast<std::uint16_t>(20000 + (::getpid() % 20000));
    const MeshCredentials mesh = MeshCredentials::generate();
    const MeshCredentials other = MeshCredentials::generate();
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    const NodeKey c = NodeKey::generate();
    auto ba =
        MulticastBeacon::open(io.get_executor(), beacon_config(port), mesh.secret, a.id(), 9001);
    if (!ba) GTEST_SKIP() << "multicast unavailable here: " << ba.error().what();
    auto bb =
        MulticastBeacon::open(io.get_executor(), beacon_config(port), mesh.secret, b.id(), 9002);
    auto bc =
        MulticastBeacon::open(io.get_executor(), beacon_config(port), other.secret, c.id(), 9003);
    ASSERT_TRUE(bb && bc);
    std::map<NodeId, std::vector<Beacon>> heard;  // who heard which beacons
    auto listen = [&](MulticastBeacon& m, NodeId self) {
        asio::co_spawn(io, m.run([&heard, self](const Beacon& beacon, const std::string& host) {
            EXPECT_EQ(host, "127.0.0.1");
            heard[self].push_back(beacon);
        }),
                       [](std::exception_ptr) {});
    };
    listen(**ba, a.id());
    listen(**bb, b.id());
    listen(**bc, c.id());
    run_io(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 30 && (heard[a.id()].empty() || heard[b.id()].empty()); ++i) {
            co_await sleep_for(100ms);
        }
        co_await sleep_for(300ms);
        (*ba)->stop();
        (*bb)->stop();
        (*bc)->stop();
    });
    if (heard[a.id()].empty() && heard[b.id()].empty() && (*ba)->beacons_rejected() == 0) {
        GTEST_SKIP() << "no multicast datagram was delivered on loopback in this sandbox";
    }
    ASSERT_FALSE(heard[a.id()].empty());
    ASSERT_FALSE(heard[b.id()].empty());
    for (const Beacon& x : heard[a.id()]) EXPECT_EQ(x.node_id, b.id());  // never c, never itself
    for (const Beacon& x : heard[b.id()]) EXPECT_EQ(x.node_id, a.id());
    EXPECT_EQ(heard[a.id()].front().tcp_port, 9002);
    EXPECT_TRUE(heard[c.id()].empty());        // c is in another mesh
    EXPECT_GT((*bc)->beacons_rejected(), 0u);  // it received ours and could not read them
    EXPECT_GT((*ba)->beacons_rejected(), 0u);
}

}  // namespace
}  // namespace brigade::mesh
