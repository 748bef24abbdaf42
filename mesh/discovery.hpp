#pragma once
// Finding peers: authenticated LAN beacons, static seeds and gossip (PROTOCOL.md §5).
//
// Sans-io parts (unit-tested): the beacon codec and `PeerDirectory`, which turns beacons, seeds,
// gossip and ticks into PeerSeen / PeerLost events. The Asio part, `MulticastBeacon`
// (multicast_beacon.hpp), sends and receives beacons on UDP multicast (default
// 239.255.81.77:8178, TTL 1).
//
// Beacon (75 bytes): "BRB1" | 24-byte random nonce | XChaCha20-Poly1305(key, nonce, ad = "BRB1",
// {u8 version, node id (20), u16 tcp port, u64 unix time ms}). key = BLAKE2b-256 keyed with the
// mesh secret over "brigade beacon key v1". Without the secret a beacon is random bytes: it cannot
// be read, forged or linked to a node. A beacon older or newer than `beacon_window` (clock skew
// allowance) is rejected, and a nonce seen within the window is rejected as a replay.

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "mesh/bytes.hpp"
#include "mesh/errors.hpp"
#include "mesh/identity.hpp"
#include "mesh/membership.hpp"
#include "mesh/messages.hpp"

namespace brigade::mesh {

inline constexpr std::size_t kBeaconBytes = 75;
inline constexpr std::string_view kDefaultMulticastGroup = "239.255.81.77";
inline constexpr std::uint16_t kDefaultMeshPort = 8178;
inline constexpr std::size_t kMaxAddressesPerPeer = 8;

using BeaconKey = std::array<std::uint8_t, 32>;
using BeaconNonce = std::array<std::uint8_t, 24>;

BeaconKey beacon_key(const MeshSecret& secret);

struct Beacon {
    NodeId node_id;
    std::uint16_t tcp_port = 0;
    std::uint64_t unix_ms = 0;
    BeaconNonce nonce{};
};

// `nonce` is random in production; tests pass a fixed one.
Bytes encode_beacon(const BeaconKey& key, const NodeId& id, std::uint16_t tcp_port,
                    std::uint64_t unix_ms, const BeaconNonce& nonce);
Bytes encode_beacon(const BeaconKey& key, const NodeId& id, std::uint16_t tcp_port,
                    std::uint64_t unix_ms);
// Authenticates and decodes; checks the time window (not replays: see BeaconReplayGuard).
Result<Beacon> decode_beacon(const BeaconKey& key, ByteSpan datagram, std::uint64_t now_unix_ms,
                             std::chrono::milliseconds window);

// Remembers nonces for the window; a repeat within it is a replay.
class BeaconReplayGuard {
public:
    explicit BeaconReplayGuard(std::chrono::milliseconds window) : window_ms_(window.count()) {}
    // True if fresh (and remembers it); false for a replay.
    bool check_and_remember(const Beacon& b, std::uint64_t now_unix_ms);
    std::size_t size() const { return seen_.size(); }

private:
    std::uint64_t window_ms_;
    std::map<BeaconNonce, std::uint64_t> seen_;  // nonce -> unix ms when first seen
};

struct DiscoveryConfig {
    std::chrono::milliseconds beacon_interval{2000};
    std::chrono::milliseconds beacon_window{60000};
    std::chrono::milliseconds lost_after{10000};  // no beacon or gossip about a peer for this long
};

enum class DiscoverySource { kBeacon, kSeed, kGossip };

struct DiscoveryEvent {
    enum class Kind { kPeerSeen, kPeerLost };
    Kind kind;
    std::optional<NodeId> id;  // unknown for a seed until its link's handshake names it
    PeerAddress address;
    DiscoverySource source;
};

// Every peer this node knows about and where to reach it. Sans-io.
class PeerDirectory {
public:
    PeerDirectory(NodeId self, DiscoveryConfig config = {});

    std::vector<DiscoveryEvent> add_seed(const PeerAddress& address);
    std::vector<DiscoveryEvent> on_beacon(const Beacon& beacon, const std::string& source_host,
                                          Clock::time_point now);
    // Gossip from linked peer `from`: new ids become PeerSeen; known ones are refreshed. The
    // sender's entry about itself says where it listens now (dialled first); what it says about
    // others is added after the addresses we already have.
    std::vector<DiscoveryEvent> on_gossip(const NodeId& from, const PeerList& list,
                                          Clock::time_point now);
    // A link to `id` is up (e.g. from a seed): it is known, at this address.
    std::vector<DiscoveryEvent> on_linked(const NodeId& id, const PeerAddress& address,
                                          Clock::time_point now);
    std::vector<DiscoveryEvent> tick(Clock::time_point now);

    // What to gossip: every known peer with an id, plus ourselves at `self_addresses`.
    PeerList peer_list(const std::vector<PeerAddress>& self_addresses) const;
    std::vector<PeerAddress> seeds() const { return seeds_; }
    std::optional<PeerAddress> address_of(const NodeId& id) const;
    std::size_t size() const { return peers_.size(); }

private:
    struct Known {
        std::vector<PeerAddress> addresses;
        Clock::time_point last_refresh{};
        DiscoverySource source = DiscoverySource::kBeacon;
        std::optional<PeerAddress> linked_at;  // where our last dialled link to it came up
    };
    // kFirst: the peer itself says it is there now; kLast: hearsay.
    enum class Placement { kFirst, kLast };
    std::vector<DiscoveryEvent> refresh(const NodeId& id, const PeerAddress& address,
                                        DiscoverySource source, Clock::time_point now,
                                        Placement placement);

    NodeId self_;
    DiscoveryConfig config_;
    std::vector<PeerAddress> seeds_;
    std::map<NodeId, Known> peers_;
};

}  // namespace brigade::mesh
