#include "mesh/discovery.hpp"

#include <sodium.h>

#include <algorithm>
#include <cstring>

#include "mesh/sodium_init.hpp"

namespace brigade::mesh {

namespace {

constexpr std::array<std::uint8_t, 4> kBeaconMagic = {'B', 'R', 'B', '1'};
constexpr std::uint8_t kBeaconVersion = 1;
constexpr std::size_t kBeaconPlainBytes = 1 + 20 + 2 + 8;

}  // namespace

BeaconKey beacon_key(const MeshSecret& secret) {
    static constexpr std::string_view kContext = "brigade beacon key v1";
    BeaconKey k{};
    crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(kContext.data()),
                       kContext.size(), secret.data(), secret.size());
    return k;
}

Bytes encode_beacon(const BeaconKey& key, const NodeId& id, std::uint16_t tcp_port,
                    std::uint64_t unix_ms, const BeaconNonce& nonce) {
    Bytes plain;
    ByteWriter w(plain);
    w.u8(kBeaconVersion);
    w.array(id.bytes);
    w.u16(tcp_port);
    w.u64(unix_ms);
    Bytes out;
    out.reserve(kBeaconBytes);
    out.insert(out.end(), kBeaconMagic.begin(), kBeaconMagic.end());
    out.insert(out.end(), nonce.begin(), nonce.end());
    const std::size_t at = out.size();
    out.resize(at + plain.size() + crypto_aead_xchacha20poly1305_ietf_ABYTES);
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(out.data() + at, &clen, plain.data(), plain.size(),
                                               kBeaconMagic.data(), kBeaconMagic.size(), nullptr,
                                               nonce.data(), key.data());
    return out;
}

Bytes encode_beacon(const BeaconKey& key, const NodeId& id, std::uint16_t tcp_port,
                    std::uint64_t unix_ms) {
    ensure_sodium_initialized();
    BeaconNonce nonce{};
    randombytes_buf(nonce.data(), nonce.size());
    return encode_beacon(key, id, tcp_port, unix_ms, nonce);
}

Result<Beacon> decode_beacon(const BeaconKey& key, ByteSpan datagram, std::uint64_t now_unix_ms,
                             std::chrono::milliseconds window) {
    if (datagram.size() != kBeaconBytes ||
        !std::equal(kBeaconMagic.begin(), kBeaconMagic.end(), datagram.begin())) {
        return make_error(errc::bad_beacon, "not a brigade beacon");
    }
    Beacon b;
    std::memcpy(b.nonce.data(), datagram.data() + 4, b.nonce.size());
    std::array<std::uint8_t, kBeaconPlainBytes> plain{};
    unsigned long long plen = 0;
    const ByteSpan ct = datagram.subspan(4 + b.nonce.size());
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            plain.data(), &plen, nullptr, ct.data(), ct.size(), kBeaconMagic.data(),
            kBeaconMagic.size(), b.nonce.data(), key.data()) != 0 ||
        plen != kBeaconPlainBytes) {
        return make_error(errc::bad_beacon, "beacon from another mesh or tampered");
    }
    ByteReader r(plain);
    if (r.u8() != kBeaconVersion) return make_error(errc::bad_beacon, "unknown beacon version");
    b.node_id = NodeId{r.array<20>()};
    b.tcp_port = r.u16();
    b.unix_ms = r.u64();
    const std::uint64_t w = static_cast<std::uint64_t>(window.count());
    const std::uint64_t skew =
        b.unix_ms > now_unix_ms ? b.unix_ms - now_unix_ms : now_unix_ms - b.unix_ms;
    if (skew > w) {
        return make_error(errc::bad_beacon, "beacon timestamp is " + std::to_string(skew) +
                                                " ms away from our clock (window " +
                                                std::to_string(w) +
                                                " ms): replayed, or clocks out of sync");
    }
    if (b.tcp_port == 0) return make_error(errc::bad_beacon, "beacon with port 0");
    return b;
}

bool BeaconReplayGuard::check_and_remember(const Beacon& b, std::uint64_t now_unix_ms) {
    // Forget nonces whose beacons would now fail the time window anyway (2x: both directions).
    for (auto it = seen_.begin(); it != seen_.end();) {
        if (now_unix_ms > it->second + 2 * window_ms_) {
            it = seen_.erase(it);
        } else {
            ++it;
        }
    }
    return seen_.emplace(b.nonce, now_unix_ms).second;
}

PeerDirectory::PeerDirectory(NodeId self, DiscoveryConfig config) : self_(self), config_(config) {}

std::vector<DiscoveryEvent> PeerDirectory::add_seed(const PeerAddress& address) {
    if (std::find(seeds_.begin(), seeds_.end(), address) != seeds_.end()) return {};
    seeds_.push_back(address);
    return {{DiscoveryEvent::Kind::kPeerSeen, std::nullopt, address, DiscoverySource::kSeed}};
}

std::vector<DiscoveryEvent> PeerDirectory::refresh(const NodeId& id, const PeerAddress& address,
                                                   DiscoverySource source, Clock::time_point now,
                                                   Placement placement) {
    if (id == self_) return {};
    auto [it, inserted] = peers_.try_emplace(id);
    Known& k = it->second;
    k.last_refresh = std::max(k.last_refresh, now);
    auto& addresses = k.addresses;
    const auto at = std::find(addresses.begin(), addresses.end(), address);
    const bool new_address = at == addresses.end();
    if (placement == Placement::kFirst) {
        // The peer's own word (its beacon, its gossip about itself, a link to it): it listens
        // there now, so that address is dialled first.
        if (new_address) {
            addresses.insert(addresses.begin(), address);
        } else {
            std::rotate(addresses.begin(), at, at + 1);
        }
    } else if (new_address) {
        // Hearsay goes after what we have, in the order heard: a third node's list may still
        // name ports of the peer's earlier runs.
        addresses.push_back(address);
    }
    if (addresses.size() > kMaxAddressesPerPeer) addresses.resize(kMaxAddressesPerPeer);
    const bool kept = std::find(addresses.begin(), addresses.end(), address) != addresses.end();
    if (inserted) k.source = source;
    if (inserted || (new_address && kept)) {
        return {{DiscoveryEvent::Kind::kPeerSeen, id, address, source}};
    }
    return {};
}

std::vector<DiscoveryEvent> PeerDirectory::on_beacon(const Beacon& beacon,
                                                     const std::string& source_host,
                                                     Clock::time_point now) {
    return refresh(beacon.node_id, PeerAddress{source_host, beacon.tcp_port},
                   DiscoverySource::kBeacon, now, Placement::kFirst);
}

std::vector<DiscoveryEvent> PeerDirectory::on_gossip(const NodeId& from, const PeerList& list,
                                                     Clock::time_point now) {
    std::vector<DiscoveryEvent> events;
    for (const PeerInfo& p : list.peers) {
        std::vector<PeerAddress> usable;
        for (const PeerAddress& a : p.addresses) {
            if (!a.host.empty() && a.port != 0) usable.push_back(a);
        }
        if (p.id == from) {
            // Where the sender listens now, best first: placed first in its order (so walked
            // back to front). Of those, the one our link to it came up at leads: another may
            // not be reachable from here (a second interface).
            if (auto known = peers_.find(from); known != peers_.end() && known->second.linked_at) {
                const auto at = std::find(usable.begin(), usable.end(), *known->second.linked_at);
                if (at != usable.end()) std::rotate(usable.begin(), at, at + 1);
            }
            for (auto a = usable.rbegin(); a != usable.rend(); ++a) {
                auto e = refresh(p.id, *a, DiscoverySource::kGossip, now, Placement::kFirst);
                events.insert(events.end(), e.begin(), e.end());
            }
        } else {
            for (const PeerAddress& a : usable) {
                auto e = refresh(p.id, a, DiscoverySource::kGossip, now, Placement::kLast);
                events.insert(events.end(), e.begin(), e.end());
            }
        }
    }
    return events;
}

std::vector<DiscoveryEvent> PeerDirectory::on_linked(const NodeId& id, const PeerAddress& address,
                                                     Clock::time_point now) {
    // Where it listens now goes first, even if known before: gossip keeps a restarted node's
    // old ports in the list, and a redial after a link drop that tried those first took longer
    // than the suspect time (the soak's link blips).
    auto events = refresh(id, address, DiscoverySource::kSeed, now, Placement::kFirst);
    if (auto it = peers_.find(id); it != peers_.end()) it->second.linked_at = address;
    return events;
}

std::vector<DiscoveryEvent> PeerDirectory::tick(Clock::time_point now) {
    std::vector<DiscoveryEvent> events;
    for (auto it = peers_.begin(); it != peers_.end();) {
        if (now - it->second.last_refresh >= config_.lost_after) {
            events.push_back(
                {DiscoveryEvent::Kind::kPeerLost, it->first,
                 it->second.addresses.empty() ? PeerAddress{} : it->second.addresses.front(),
                 it->second.source});
            it = peers_.erase(it);
        } else {
            ++it;
        }
    }
    return events;
}

PeerList PeerDirectory::peer_list(const std::vector<PeerAddress>& self_addresses) const {
    PeerList list;
    if (!self_addresses.empty()) list.peers.push_back(PeerInfo{self_, self_addresses});
    for (const auto& [id, k] : peers_) list.peers.push_back(PeerInfo{id, k.addresses});
    return list;
}

std::optional<PeerAddress> PeerDirectory::address_of(const NodeId& id) const {
    auto it = peers_.find(id);
    if (it == peers_.end() || it->second.addresses.empty()) return std::nullopt;
    return it->second.addresses.front();
}

}  // namespace brigade::mesh
