#include "mesh/multicast_beacon.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/multicast.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "mesh/sodium_init.hpp"

namespace brigade::mesh {
namespace asio = boost::asio;
using asio::ip::udp;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

std::uint64_t unix_ms_now() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

}  // namespace

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
