// Beacon codec, replay guard and peer directory (sans-io parts of discovery).

#include "mesh/discovery.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace brigade::mesh {
namespace {

using namespace std::chrono_literals;

NodeId id_of(std::uint8_t n) {
    NodeId id;
    id.bytes[0] = n;
    return id;
}

MeshSecret secret_of(std::uint8_t fill) {
    MeshSecret s{};
    s.fill(fill);
    return s;
}

constexpr std::uint64_t kNow = 1'800'000'000'000ull;  // unix ms
const Clock::time_point t0 = Clock::time_point{} + 1h;

TEST(Beacon, RoundTripsWithTheMeshKey) {
    const BeaconKey key = beacon_key(secret_of(1));
    const Bytes b = encode_beacon(key, id_of(7), 8178, kNow);
    EXPECT_EQ(b.size(), kBeaconBytes);
    auto d = decode_beacon(key, b, kNow + 500, 60s);
    ASSERT_TRUE(d) << d.error().what();
    EXPECT_EQ(d->node_id, id_of(7));
    EXPECT_EQ(d->tcp_port, 8178);
    EXPECT_EQ(d->unix_ms, kNow);
}

TEST(Beacon, UselessToStrangers) {
    const Bytes b = encode_beacon(beacon_key(secret_of(1)), id_of(7), 8178, kNow);
    // Another mesh's key cannot read it...
    auto other = decode_beacon(beacon_key(secret_of(2)), b, kNow, 60s);
    ASSERT_FALSE(other);
    EXPECT_EQ(other.error().code, errc::bad_beacon);
    // ...and the node id and port are not in the datagram in clear.
    const auto& idb = id_of(7).bytes;
    EXPECT_EQ(std::search(b.begin(), b.end(), idb.begin(), idb.begin() + 8), b.end());
    // Two beacons of the same node differ entirely after the magic (random nonce).
    const Bytes b2 = encode_beacon(beacon_key(secret_of(1)), id_of(7), 8178, kNow);
    EXPECT_NE(Bytes(b.begin() + 4, b.end()), Bytes(b2.begin() + 4, b2.end()));
}

TEST(Beacon, AnyAlteredByteIsRejected) {
    const BeaconKey key = beacon_key(secret_of(1));
    const Bytes b = encode_beacon(key, id_of(7), 8178, kNow);
    for (std::size_t i = 0; i < b.size(); ++i) {
        Bytes t = b;
        t[i] ^= 0x20;
        EXPECT_FALSE(decode_beacon(key, t, kNow, 60s)) << "byte " << i;
    }
    EXPECT_FALSE(decode_beacon(key, Bytes(b.begin(), b.end() - 1), kNow, 60s));
    EXPECT_FALSE(decode_beacon(key, Bytes{}, kNow, 60s));
}

TEST(Beacon, OldOrFutureBeaconsAreRejected) {
    const BeaconKey key = beacon_key(secret_of(1));
    const Bytes b = encode_beacon(key, id_of(7), 8178, kNow);
    EXPECT_TRUE(decode_beacon(key, b, kNow + 59'000, 60s));
    EXPECT_TRUE(decode_beacon(key, b, kNow - 59'000, 60s));
    auto old = decode_beacon(key, b, kNow + 61'000, 60s);
    ASSERT_FALSE(old);
    EXPECT_NE(old.error().message.find("replayed"), std::string::npos);
    EXPECT_FALSE(decode_beacon(key, b, kNow - 61'000, 60s));
}

TEST(Beacon, ReplayWithinTheWindowIsCaught) {
    const BeaconKey key = beacon_key(secret_of(1));
    BeaconReplayGuard guard(60s);
    const Bytes b = encode_beacon(key, id_of(7), 8178, kNow);
    auto d = decode_beacon(key, b, kNow, 60s);
    ASSERT_TRUE(d);
    EXPECT_TRUE(guard.check_and_remember(*d, kNow));
    EXPECT_FALSE(guard.check_and_remember(*d, kNow + 1000));
    // Forgotten only once the time window alone would reject it.
    EXPECT_FALSE(guard.check_and_remember(*d, kNow + 100'000));
    EXPECT_TRUE(guard.check_and_remember(*d, kNow + 130'000));
}

TEST(PeerDirectory, BeaconsSeedsGossipAndLoss) {
    PeerDirectory dir(id_of(1), DiscoveryConfig{2s, 60s, 10s});
    Beacon b;
    b.node_id = id_of(2);
    b.tcp_port = 8178;
    auto seen = dir.on_beacon(b, "10.0.0.2", t0);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].kind, DiscoveryEvent::Kind::kPeerSeen);
    EXPECT_EQ(*seen[0].id, id_of(2));
    EXPECT_EQ(seen[0].address, (PeerAddress{"10.0.0.2", 8178}));
    EXPECT_TRUE(dir.on_beacon(b, "10.0.0.2", t0 + 2s).empty());  // refresh, no event
    // Our own beacon (multicast loopback) is not a peer.
    b.node_id = id_of(1);
    EXPECT_TRUE(dir.on_beacon(b, "10.0.0.1", t0).empty());
    // A seed has no id until linked.
    auto s = dir.add_seed({"seed.local", 8178});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_FALSE(s[0].id);
    EXPECT_TRUE(dir.add_seed({"seed.local", 8178}).empty());
    // Gossip from node 2 names node 3 (and us, and node 2 itself).
    PeerList list{{PeerInfo{id_of(3), {{"10.0.0.3", 8178}}},
                   PeerInfo{id_of(1), {{"10.0.0.1", 8178}}},
                   PeerInfo{id_of(2), {{"10.0.0.2", 8178}}}}};
    auto g = dir.on_gossip(id_of(2), list, t0 + 3s);
    ASSERT_EQ(g.size(), 1u);
    EXPECT_EQ(*g[0].id, id_of(3));
    EXPECT_EQ(g[0].source, DiscoverySource::kGossip);
    EXPECT_EQ(dir.size(), 2u);
    // Node 2 last refreshed at 3 s, node 3 at 3 s: both lost at 13 s.
    EXPECT_TRUE(dir.tick(t0 + 12s).empty());
    auto lost = dir.tick(t0 + 13s);
    EXPECT_EQ(lost.size(), 2u);
    EXPECT_EQ(dir.size(), 0u);
    EXPECT_EQ(dir.seeds().size(), 1u);  // seeds are never lost
}

TEST(PeerDirectory, GossipListIncludesSelfAndEveryKnownPeer) {
    PeerDirectory dir(id_of(1));
    Beacon b;
    b.node_id = id_of(2);
    b.tcp_port = 9000;
    dir.on_beacon(b, "10.0.0.2", t0);
    const PeerList list = dir.peer_list({{"10.0.0.1", 8178}});
    ASSERT_EQ(list.peers.size(), 2u);
    EXPECT_EQ(list.peers[0].id, id_of(1));
    EXPECT_EQ(list.peers[1].addresses.front(), (PeerAddress{"10.0.0.2", 9000}));
    // A node that moved is dialled at its newest address first.
    dir.on_beacon(b, "10.0.0.99", t0 + 1s);
    EXPECT_EQ(dir.address_of(id_of(2))->host, "10.0.0.99");
}

// A node that restarted on another port is linked at the new one; a third node's gossip still
// lists the old one. The address a link came up at goes first, known before or not.
TEST(PeerDirectory, TheAddressALinkCameUpAtIsDialledFirst) {
    PeerDirectory dir(id_of(1));
    const PeerAddress now_at{"127.0.0.1", 9001};
    const PeerAddress old_port{"127.0.0.1", 9000};
    PeerList gossip;
    gossip.peers.push_back(PeerInfo{id_of(2), {old_port, now_at}});
    dir.on_gossip(id_of(3), gossip, t0);
    ASSERT_EQ(*dir.address_of(id_of(2)), old_port);
    dir.on_linked(id_of(2), now_at, t0 + 2s);
    EXPECT_EQ(*dir.address_of(id_of(2)), now_at);
    const auto list = dir.peer_list({});
    ASSERT_EQ(list.peers.size(), 1u);
    EXPECT_EQ(list.peers[0].addresses, (std::vector<PeerAddress>{now_at, old_port}));
}

// The order gossip gives is kept: a node's own entry (where it listens now) leads, and what a
// third node says about it is added after. Session 38's soak: receivers reversed the sender's
// list, so a rejoining node was dialled at the ports of its earlier runs first.
TEST(PeerDirectory, APeersOwnWordLeadsAndHearsayFollowsInTheOrderHeard) {
    PeerDirectory dir(id_of(1));
    const PeerAddress current{"127.0.0.1", 9003};
    const PeerAddress earlier{"127.0.0.1", 9002};
    const PeerAddress earliest{"127.0.0.1", 9001};
    // Node 3 vouches for node 2, best address first.
    PeerList from3;
    from3.peers.push_back(PeerInfo{id_of(2), {current, earlier}});
    dir.on_gossip(id_of(3), from3, t0);
    EXPECT_EQ(dir.peer_list({}).peers[0].addresses, (std::vector<PeerAddress>{current, earlier}));
    // Node 4 knows an even older port: it goes last, not first.
    PeerList from4;
    from4.peers.push_back(PeerInfo{id_of(2), {earliest}});
    dir.on_gossip(id_of(4), from4, t0 + 1s);
    EXPECT_EQ(dir.peer_list({}).peers[0].addresses,
              (std::vector<PeerAddress>{current, earlier, earliest}));
    // Node 2 restarted and says where it listens now (two interfaces, in its order).
    const PeerAddress restarted{"127.0.0.1", 9004};
    const PeerAddress second_interface{"10.0.0.2", 9004};
    PeerList from2;
    from2.peers.push_back(PeerInfo{id_of(2), {restarted, second_interface}});
    dir.on_gossip(id_of(2), from2, t0 + 2s);
    EXPECT_EQ(dir.peer_list({}).peers[0].addresses,
              (std::vector<PeerAddress>{restarted, second_interface, current, earlier, earliest}));
    // Linked at its second interface: that one leads, also after its next word.
    dir.on_linked(id_of(2), second_interface, t0 + 3s);
    dir.on_gossip(id_of(2), from2, t0 + 4s);
    EXPECT_EQ(dir.peer_list({}).peers[0].addresses,
              (std::vector<PeerAddress>{second_interface, restarted, current, earlier, earliest}));
    // At most kMaxAddressesPerPeer are kept: hearsay beyond them is dropped, with no event.
    PeerList many;
    many.peers.push_back(PeerInfo{id_of(2), {}});
    for (std::uint16_t port = 7000; port < 7010; ++port) {
        many.peers[0].addresses.push_back({"127.0.0.1", port});
    }
    const auto events = dir.on_gossip(id_of(3), many, t0 + 5s);
    EXPECT_EQ(dir.peer_list({}).peers[0].addresses.size(), kMaxAddressesPerPeer);
    EXPECT_EQ(events.size(), kMaxAddressesPerPeer - 5);
    EXPECT_EQ(*dir.address_of(id_of(2)), second_interface);
}

}  // namespace
}  // namespace brigade::mesh
