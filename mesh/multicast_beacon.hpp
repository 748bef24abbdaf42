#pragma once
// The Asio driver of LAN discovery: sends authenticated beacons (discovery.hpp) to a UDP
// multicast group and reports the authentic, fresh ones it hears. Kept apart from the sans-io
// beacon codec so parsers and fuzzers need no Asio.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>

#include "mesh/discovery.hpp"
#include "mesh/log.hpp"

namespace brigade::mesh {

// UDP multicast beacons. Owned by one io_context; `run` loops until `stop`.
class MulticastBeacon {
public:
    struct Config {
        std::string group{kDefaultMulticastGroup};
        std::uint16_t port = kDefaultMeshPort;
        std::string interface_address = "0.0.0.0";  // which interface joins the group
        std::chrono::milliseconds interval{2000};
        std::chrono::milliseconds window{60000};
        bool loopback = true;  // also deliver to nodes on this host (tests, several nodes per host)
        LogSink log;
    };
    using Handler = std::function<void(const Beacon&, const std::string& source_host)>;

    static Result<std::unique_ptr<MulticastBeacon>> open(const boost::asio::any_io_executor& ex,
                                                         Config config, const MeshSecret& secret,
                                                         NodeId self, std::uint16_t tcp_port);
    // Sends a beacon now and every interval; calls `on_beacon` for each authentic, fresh beacon
    // from another node. Returns when stopped.
    boost::asio::awaitable<void> run(Handler on_beacon);
    void stop();
    std::uint64_t beacons_rejected() const { return rejected_; }

private:
    MulticastBeacon(const boost::asio::any_io_executor& ex, Config config, const MeshSecret& secret,
                    NodeId self, std::uint16_t tcp_port);
    boost::asio::awaitable<void> send_loop();
    boost::asio::awaitable<void> run_impl(std::unique_ptr<Handler> on_beacon);

    Config config_;
    BeaconKey key_;
    NodeId self_;
    std::uint16_t tcp_port_;
    boost::asio::ip::udp::socket socket_;
    boost::asio::ip::udp::endpoint group_endpoint_;
    boost::asio::steady_timer timer_;
    BeaconReplayGuard replay_;
    bool stopped_ = false;
    std::uint64_t rejected_ = 0;
};

}  // namespace brigade::mesh
