#include "mesh/discovery.hpp"

#include <sodium.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/multicast.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>

#include "mesh/sodium_init.hpp"

namespace brigade::mesh {
namespace asio = boost::asio;
using asio::ip::udp;

namespace {

constexpr std::array<std::uint8_t, 4> kBeaconMagic = {'B', 'R', 'B', '1'};
constexpr std::uint8_t kBeaconVersion = 1;
constexpr std::size_t kBeaconPlainBytes = 1 + 20 + 2 + 8;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

std::uint64_t unix_ms_now() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

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
                                                   DiscoverySource source, Clock::time_point now) {
    if (id == self_) return {};
    auto [it, inserted] = peers_.try_emplace(id);
    Known& k = it->second;
    k.last_refresh = std::max(k.last_refresh, now);
    const bool new_address =
        std::find(k.addresses.begin(), k.addresses.end(), address) == k.addresses.end();
    if (new_address) {
        // Newest first: a node that moved is dialled at its new address first.
        k.addresses.insert(k.addresses.begin(), address);
        if (k.addresses.size() > 8) k.addresses.pop_back();
    }
    if (inserted) k.source = source;
    if (inserted || new_address) return {{DiscoveryEvent::Kind::kPeerSeen, id, address, source}};
    return {};
}

std::vector<DiscoveryEvent> PeerDirectory::on_beacon(const Beacon& beacon,
                                                     const std::string& source_host,
                                                     Clock::time_point now) {
    return refresh(beacon.node_id, PeerAddress{source_host, beacon.tcp_port},
                   DiscoverySource::kBeacon, now);
}

std::vector<DiscoveryEvent> PeerDirectory::on_gossip(const PeerList& list, Clock::time_point now) {
    std::vector<DiscoveryEvent> events;
    for (const PeerInfo& p : list.peers) {
        for (const PeerAddress& a : p.addresses) {
            if (a.host.empty() || a.port == 0) continue;
            auto e = refresh(p.id, a, DiscoverySource::kGossip, now);
            events.insert(events.end(), e.begin(), e.end());
        }
    }
    return events;
}

std::vector<DiscoveryEvent> PeerDirectory::on_linked(const NodeId& id, const PeerAddress& address,
                                                     Clock::time_point now) {
    auto events = refresh(id, address, DiscoverySource::kSeed, now);
    if (auto it = peers_.find(id); it != peers_.end()) it->second.linked = true;
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

MulticastBeacon::MulticastBeacon(const asio::any_io_executor& ex, Config config,
                                 const MeshSecret& secret, NodeId self, std::uint16_t tcp_port)
    : config_(std::move(config)),
      key_(beacon_key(secret)),
      self_(self),
      tcp_port_(tcp_port),
      socket_(ex),
      timer_(ex),
      replay_(config_.window) {}

Result<std::unique_ptr<MulticastBeacon>> MulticastBeacon::open(const asio::any_io_executor& ex,
                                                               Config config,
                                                               const MeshSecret& secret,
                                                               NodeId self,
                                                               std::uint16_t tcp_port) {
    ensure_sodium_initialized();
    boost::system::error_code ec;
    const auto group = asio::ip::make_address(config.group, ec);
    if (ec || !group.is_multicast()) {
        return make_error(errc::invalid_argument,
                          "'" + config.group + "' is not a multicast group");
    }
    const auto iface = asio::ip::make_address(config.interface_address, ec);
    if (ec || !iface.is_v4() || !group.is_v4()) {
        return make_error(errc::invalid_argument,
                          "multicast discovery needs IPv4 group and interface");
    }
    std::unique_ptr<MulticastBeacon> b(new MulticastBeacon(ex, config, secret, self, tcp_port));
    udp::socket& s = b->socket_;
    const udp::endpoint listen(asio::ip::address_v4::any(), config.port);
    s.open(listen.protocol(), ec);
    // Several nodes on one host (tests) share the port; each gets every datagram.
    if (!ec) s.set_option(udp::socket::reuse_address(true), ec);
    if (!ec) s.bind(listen, ec);
    if (!ec) s.set_option(asio::ip::multicast::join_group(group.to_v4(), iface.to_v4()), ec);
    if (!ec) s.set_option(asio::ip::multicast::enable_loopback(config.loopback), ec);
    if (!ec) s.set_option(asio::ip::multicast::hops(1), ec);  // never leave the LAN
    if (!ec && !iface.is_unspecified())
        s.set_option(asio::ip::multicast::outbound_interface(iface.to_v4()), ec);
    if (ec) {
        return make_error(errc::io_error, "cannot join multicast group " + config.group + ":" +
                                              std::to_string(config.port) + ": " + ec.message());
    }
    b->group_endpoint_ = udp::endpoint(group, config.port);
    return b;
}

asio::awaitable<void> MulticastBeacon::send_loop() {
    while (!stopped_) {
        const Bytes datagram = encode_beacon(key_, self_, tcp_port_, unix_ms_now());
        auto awaited_w1_ =
            co_await socket_.async_send_to(asio::buffer(datagram), group_endpoint_, kNoThrow);
        auto ec = std::move(std::get<0>(awaited_w1_));
        auto n = std::move(std::get<1>(awaited_w1_));
        if (ec && !stopped_) {
            log_to(config_.log, LogLevel::kWarn, "multicast beacon send failed: " + ec.message());
        }
        timer_.expires_after(config_.interval);
        co_await timer_.async_wait(kNoThrow);
    }
}

// Not a coroutine itself: the handler is boxed before it enters one (see tcp_transport.cpp on
// GCC 12 and by-value coroutine parameters).
asio::awaitable<void> MulticastBeacon::run(Handler on_beacon) {
    return run_impl(std::make_unique<Handler>(std::move(on_beacon)));
}

asio::awaitable<void> MulticastBeacon::run_impl(std::unique_ptr<Handler> on_beacon) {
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(ex, send_loop(), [log = config_.log](std::exception_ptr e) {
        if (e) log_to(log, LogLevel::kError, "multicast beacon sender stopped by an exception");
    });
    std::array<std::uint8_t, 512> buf{};
    udp::endpoint from;
    while (!stopped_) {
        auto awaited1_ = co_await socket_.async_receive_from(asio::buffer(buf), from, kNoThrow);
        auto ec = std::move(std::get<0>(awaited1_));
        auto n = std::move(std::get<1>(awaited1_));
        if (stopped_) break;
        if (ec) {
            log_to(config_.log, LogLevel::kWarn, "multicast receive failed: " + ec.message());
            asio::steady_timer pause(
                ex, std::chrono::milliseconds(100));  // no spinning on a broken socket
            co_await pause.async_wait(kNoThrow);
            continue;
        }
        const std::uint64_t now = unix_ms_now();
        auto beacon = decode_beacon(key_, ByteSpan(buf.data(), n), now, config_.window);
        if (!beacon) {
            ++rejected_;  // other meshes' beacons land here too: not worth a log line each
            continue;
        }
        if (beacon->node_id == self_) continue;
        if (!replay_.check_and_remember(*beacon, now)) {
            ++rejected_;
            log_to(config_.log, LogLevel::kDebug,
                   "replayed beacon from " + from.address().to_string());
            continue;
        }
        (*on_beacon)(*beacon, from.address().to_string());
    }
}

void MulticastBeacon::stop() {
    stopped_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
}

}  // namespace brigade::mesh
