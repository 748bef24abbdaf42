// Encrypted mesh link on loopback: round-trip latency at decode sizes (KiB) and one-way
// throughput at prefill sizes (MiB), over real TCP links (Noise handshake, ChaCha20-Poly1305
// records, frame codec), with the two ends on separate threads. Also the in-memory cost of
// sealing + opening, which bounds what one core can push.
//
//   transport_bench [--quick]
//
// Prints a markdown table. Frames are ActivationFrames of [n_tokens, 1024] BF16 (2 KiB/token).
// On a shared machine wall-clock MB/s depends on the load; "MB per CPU-second" does much less.

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "mesh/handshake.hpp"
#include "mesh/secure_channel.hpp"
#include "mesh/tcp_transport.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;
using brigade::mesh::ActivationDType;
using brigade::mesh::ActivationFrame;
using brigade::mesh::Cancel;
using brigade::mesh::Link;
using brigade::mesh::LinkConfig;
using brigade::mesh::MeshCredentials;
using brigade::mesh::Message;
using brigade::mesh::NodeKey;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t kHidden = 1024;

ActivationFrame frame_of(std::uint32_t n_tokens) {
    ActivationFrame a;
    a.dtype = ActivationDType::kBF16;
    a.hidden = kHidden;
    a.entries = {brigade::mesh::ActivationEntry{
        1, 0, n_tokens, true, std::vector<std::int32_t>(n_tokens, 7), {}}};
    a.payload.assign(static_cast<std::size_t>(n_tokens) * kHidden * 2, 0x5a);
    return a;
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// Server: echoes ActivationFrames of <= 16 tokens; acknowledges larger ones with a Cancel
// carrying their request id (so throughput runs measure one direction).
asio::awaitable<void> serve(brigade::mesh::TcpListener& listener, const NodeKey& key,
                            const MeshCredentials& mesh) {
    auto socket = co_await listener.async_accept();
    if (!socket) co_return;
    LinkConfig cfg;
    auto link = co_await brigade::mesh::async_accept_link(std::move(*socket), key, mesh, cfg);
    if (!link) co_return;
    for (;;) {
        auto m = co_await (*link)->async_receive(60s);
        if (!m) {
            std::fprintf(stderr, "server: %s\n", m.error().what().c_str());
            co_return;
        }
        auto* a = std::get_if<ActivationFrame>(&*m);
        if (a == nullptr) continue;
        if (a->rows() <= 16) {
            if (!(co_await (*link)->async_send(*m))) co_return;
        } else if (a->batch_id != 0) {
            const Message ack = Cancel{a->batch_id, ""};
            if (!(co_await (*link)->async_send(ack))) co_return;
        }
    }
}

struct Row {
    std::string what;
    std::size_t bytes;
    double value;
    std::string unit;
    std::string extra;
};

asio::awaitable<void> client(std::uint16_t port, const NodeKey& key, const MeshCredentials& mesh,
                             bool quick, std::vector<Row>& rows) {
    // Named arguments: GCC 12 mishandles braced temporaries in co_await calls (transport.hpp).
    const brigade::mesh::PeerAddress address{"127.0.0.1", port};
    const LinkConfig config;
    auto link = co_await brigade::mesh::async_connect_link(address, key, mesh, config);
    if (!link) {
        std::fprintf(stderr, "connect failed: %s\n", link.error().what().c_str());
        co_return;
    }
    // Latency: ping-pong at decode sizes.
    for (std::uint32_t tokens : {1u, 2u, 8u}) {
        const ActivationFrame f = frame_of(tokens);
        std::vector<double> us;
        const int n = quick ? 200 : 2000;
        for (int i = 0; i < n + 50; ++i) {
            const auto t = Clock::now();
            co_await (*link)->async_send(f);
            auto r = co_await (*link)->async_receive(10s);
            if (!r) {
                std::fprintf(stderr, "receive failed: %s\n", r.error().what().c_str());
                co_return;
            }
            if (i >= 50) us.push_back(seconds_since(t) * 1e6);  // skip warm-up
        }
        std::sort(us.begin(), us.end());
        std::fprintf(stderr, "latency %u tokens done\n", tokens);
        char extra[96];
        std::snprintf(extra, sizeof extra, "p99 %.1f us, n=%d", us[us.size() * 99 / 100], n);
        rows.push_back({"round trip", f.payload.size(), us[us.size() / 2], "us (median)", extra});
    }
    // Throughput: a stream of prefill-sized frames, acknowledged once at the end.
    for (std::uint32_t tokens : {512u, 2048u, 8192u}) {
        ActivationFrame f = frame_of(tokens);
        const int n = quick ? 8 : std::max(8, static_cast<int>((512u << 20) / f.payload.size()));
        const auto t = Clock::now();
        const std::clock_t cpu0 = std::clock();  // both threads: the process's CPU time
        for (int i = 0; i < n; ++i) {
            f.batch_id = (i == n - 1) ? 1 : 0;
            co_await (*link)->async_send(f);
        }
        auto ack = co_await (*link)->async_receive(60s);
        if (!ack) {
            std::fprintf(stderr, "no ack: %s\n", ack.error().what().c_str());
            co_return;
        }
        const double s = seconds_since(t);
        const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
        std::fprintf(stderr, "throughput %u tokens done\n", tokens);
        char extra[128];
        std::snprintf(extra, sizeof extra,
                      "%d frames in %.3f s; %.0f MB per CPU-second (both ends)", n, s,
                      n * static_cast<double>(f.payload.size()) / cpu / 1e6);
        rows.push_back({"one-way stream", f.payload.size(),
                        n * static_cast<double>(f.payload.size()) / s / 1e6, "MB/s", extra});
    }
    (*link)->close("bench done");
}

// Seal + open in memory with fresh session keys: the crypto + codec cost alone.
void in_memory(bool quick, std::vector<Row>& rows) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    brigade::mesh::MeshSecret psk{};
    brigade::mesh::LinkHandshake i(brigade::mesh::LinkHandshake::Role::kInitiator, a, psk);
    brigade::mesh::LinkHandshake r(brigade::mesh::LinkHandshake::Role::kResponder, b, psk);
    auto m1 = i.start();
    (void)r.start();
    auto m2 = r.on_message(*m1);
    auto m3 = i.on_message(*m2);
    auto m4 = r.on_message(*m3);
    (void)i.on_message(*m4);
    auto oi = i.take_outcome();
    auto orr = r.take_outcome();
    brigade::mesh::SecureChannel tx(oi.send, oi.recv);
    brigade::mesh::SecureChannel rx(orr.send, orr.recv);
    const ActivationFrame f = frame_of(2048);
    const int n = quick ? 16 : 128;
    brigade::mesh::Bytes wire;
    const auto t = Clock::now();
    for (int k = 0; k < n; ++k) {
        wire.clear();
        (void)tx.seal(f, wire);
        (void)rx.feed(wire);
        (void)rx.next();
    }
    const double s = seconds_since(t);
    rows.push_back({"seal+open in memory (1 core)", f.payload.size(),
                    n * static_cast<double>(f.payload.size()) / s / 1e6, "MB/s", ""});
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    const MeshCredentials mesh = MeshCredentials::generate();
    const NodeKey server_key = NodeKey::generate();
    const NodeKey client_key = NodeKey::generate();

    asio::io_context server_io;
    auto listener = brigade::mesh::TcpListener::open(server_io.get_executor(), "127.0.0.1", 0);
    if (!listener) {
        std::fprintf(stderr, "listen failed: %s\n", listener.error().what().c_str());
        return 1;
    }
    asio::co_spawn(server_io, serve(**listener, server_key, mesh), [](std::exception_ptr) {});
    std::thread server_thread([&] { server_io.run(); });

    std::vector<Row> rows;
    asio::io_context client_io;
    asio::co_spawn(client_io, client((*listener)->port(), client_key, mesh, quick, rows),
                   [](std::exception_ptr) {});
    client_io.run();
    server_io.stop();
    server_thread.join();
    in_memory(quick, rows);

    std::printf("| measurement | frame payload | result | notes |\n|---|---|---|---|\n");
    for (const Row& r : rows) {
        const double kib = r.bytes / 1024.0;
        char size[32];
        if (kib >= 1024) {
            std::snprintf(size, sizeof size, "%.0f MiB", kib / 1024);
        } else {
            std::snprintf(size, sizeof size, "%.0f KiB", kib);
        }
        std::printf("| %s | %s | %.1f %s | %s |\n", r.what.c_str(), size, r.value, r.unit.c_str(),
                    r.extra.c_str());
    }
    return rows.size() == 7 ? 0 : 1;
}
