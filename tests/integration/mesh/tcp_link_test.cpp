// Real TCP on 127.0.0.1: in-process nodes handshake, exchange frames, reject strangers, survive
// corrupted and stalled links, and time out where they must.

#include <gtest/gtest.h>

#include <deque>
#include <mutex>
#include <vector>

#include "mesh/loopback_transport.hpp"
#include "tests/integration/mesh/mesh_test_util.hpp"

namespace brigade::mesh {
namespace {

using namespace std::chrono_literals;
using test::kNoThrow;
using test::run_io;
using test::sleep_for;
namespace asio = boost::asio;

// A node that accepts links and keeps them (optionally echoing every frame back).
struct TestNode {
    TestNode(asio::io_context& io, MeshCredentials m, bool echo = false)
        : key(NodeKey::generate()), mesh(m), echo(echo) {
        auto l = TcpListener::open(io.get_executor(), "127.0.0.1", 0);
        EXPECT_TRUE(l) << l.error().what();
        listener = std::move(*l);
        config.log = [this](LogLevel, std::string_view line) { log.emplace_back(line); };
    }

    void start(asio::io_context& io) {
        asio::co_spawn(io, accept_loop(), [](std::exception_ptr) {});
    }

    asio::awaitable<void> accept_loop() {
        for (;;) {
            auto socket = co_await listener->async_accept();
            if (!socket) co_return;
            asio::co_spawn(co_await asio::this_coro::executor, serve(std::move(*socket)),
                           [](std::exception_ptr) {});
        }
    }

    asio::awaitable<void> serve(asio::ip::tcp::socket socket) {
        auto link = co_await async_accept_link(std::move(socket), key, mesh, config);
        if (!link) {
            accept_errors.push_back(link.error());
            co_return;
        }
        links.push_back(*link);
        if (!echo) co_return;
        std::shared_ptr<Link> l = *link;
        for (;;) {
            auto m = co_await l->async_receive(60s);
            if (!m) {
                receive_errors.push_back(m.error());
                co_return;
            }
            received.push_back(*m);
            if (!(co_await l->async_send(*m))) co_return;
        }
    }

    PeerAddress address() const { return {"127.0.0.1", listener->port()}; }

    NodeKey key;
    MeshCredentials mesh;
    bool echo;
    LinkConfig config;
    std::unique_ptr<TcpListener> listener;
    std::vector<std::shared_ptr<Link>> links;
    std::vector<Error> accept_errors;
    std::vector<Error> receive_errors;
    std::vector<Message> received;
    std::vector<std::string> log;
};

ActivationFrame activation(std::uint32_t n_tokens, std::uint32_t hidden) {
    ActivationFrame a;
    a.epoch = 1;
    a.batch_id = 42;
    a.first_layer = 8;
    a.dtype = ActivationDType::kBF16;
    a.hidden = hidden;
    ActivationEntry e;
    e.request_id = 3;
    e.n_tokens = n_tokens;
    e.wants_token = true;
    for (std::uint32_t i = 0; i < n_tokens; ++i) e.tokens.push_back(static_cast<std::int32_t>(i));
    a.entries.push_back(e);
    a.payload.resize(static_cast<std::size_t>(n_tokens) * hidden * 2);
    for (std::size_t i = 0; i < a.payload.size(); ++i)
        a.payload[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return a;
}

TEST(TcpLink, TwoNodesHandshakeAndExchangeFrames) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    TestNode server(io, mesh, /*echo=*/true);
    server.start(io);
    const NodeKey client_key = NodeKey::generate();
    run_io(io, [&]() -> asio::awaitable<void> {
        LinkConfig cfg;
        cfg.keepalive_interval = 50ms;
        auto link = co_await async_connect_link(server.address(), client_key, mesh, cfg);
        EXPECT_TRUE(link) << link.error().what();
        if (!link) co_return;
        EXPECT_EQ((*link)->peer().id, server.key.id());
        EXPECT_EQ((*link)->peer().hello.node_id, server.key.id());
        EXPECT_EQ((*link)->peer().remote_host, "127.0.0.1");
        // A decode-sized and a prefill-sized activation, a token, a cancel: all echoed intact.
        std::vector<Message> sent = {
            activation(1, 896), activation(512, 1024),
            TokenFrame{1, 42, {SampledTokenInfo{3, 1234, -0.5f, {}, TokenFinish::kStop}}},
            Cancel{42, "done"}};
        for (const Message& m : sent) EXPECT_TRUE(co_await (*link)->async_send(m));
        for (const Message& m : sent) {
            auto got = co_await (*link)->async_receive(10s);
            EXPECT_TRUE(got) << got.error().what();
            if (got) {
                EXPECT_TRUE(*got == m);
            }
        }
        EXPECT_EQ(server.links.size(), 1u);
        if (!server.links.empty()) {
            EXPECT_EQ(server.links[0]->peer().id, client_key.id());
        }
        // Keepalives measure the round trip.
        co_await sleep_for(300ms);
        EXPECT_TRUE((*link)->rtt().has_value());
        // Nothing pending: a receive times out and the link stays open.
        auto none = co_await (*link)->async_receive(100ms);
        EXPECT_FALSE(none);
        if (!none) {
            EXPECT_EQ(none.error().code, errc::timeout);
        }
        EXPECT_TRUE((*link)->is_open());
        (*link)->close("test done");
        co_await sleep_for(200ms);
        // The server saw a clean goodbye.
        EXPECT_EQ(server.receive_errors.size(), 1u);
        if (!server.receive_errors.empty()) {
            EXPECT_NE(server.receive_errors[0].message.find("bye"), std::string::npos)
                << server.receive_errors[0].message;
        }
    });
}

TEST(TcpLink, ThreeNodesFullMesh) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    std::vector<std::unique_ptr<TestNode>> nodes;
    for (int i = 0; i < 3; ++i) {
        nodes.push_back(std::make_unique<TestNode>(io, mesh, true));
        nodes.back()->start(io);
    }
    run_io(io, [&]() -> asio::awaitable<void> {
        // Each node dials the ones after it.
        std::vector<std::shared_ptr<Link>> dialled;
        for (int i = 0; i < 3; ++i) {
            for (int j = i + 1; j < 3; ++j) {
                const LinkConfig cfg;
                auto l = co_await async_connect_link(nodes[j]->address(), nodes[i]->key, mesh, cfg);
                EXPECT_TRUE(l) << l.error().what();
                if (!l) co_return;
                EXPECT_EQ((*l)->peer().id, nodes[j]->key.id());
                const Message hb = Heartbeat{};
                EXPECT_TRUE(co_await (*l)->async_send(hb));  // handled inside, not echoed
                const Message cancel = Cancel{static_cast<std::uint64_t>(10 * i + j), ""};
                EXPECT_TRUE(co_await (*l)->async_send(cancel));
                auto echo = co_await (*l)->async_receive(5s);
                EXPECT_TRUE(echo && std::get<Cancel>(*echo).request_id ==
                                        static_cast<std::uint64_t>(10 * i + j));
                dialled.push_back(*l);
            }
        }
        EXPECT_EQ(nodes[0]->links.size(), 0u);
        EXPECT_EQ(nodes[1]->links.size(), 1u);
        EXPECT_EQ(nodes[2]->links.size(), 2u);
    });
}

TEST(TcpLink, WrongSecretCanNeitherConnectNorReadAnything) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    MeshCredentials stranger_mesh = mesh;
    stranger_mesh.secret[0] ^= 1;  // same mesh id, one bit of secret wrong
    TestNode server(io, mesh, true);
    server.start(io);
    TestNode stranger_server(io, stranger_mesh, true);
    stranger_server.start(io);
    const NodeKey stranger = NodeKey::generate();
    const NodeKey member = NodeKey::generate();
    run_io(io, [&]() -> asio::awaitable<void> {
        // A stranger dialling a member.
        const LinkConfig cfg;
        auto l = co_await async_connect_link(server.address(), stranger, stranger_mesh, cfg);
        EXPECT_FALSE(l);
        co_await sleep_for(100ms);
        EXPECT_EQ(server.links.size(), 0u);
        EXPECT_EQ(server.accept_errors.size(), 1u);
        if (!server.accept_errors.empty()) {
            EXPECT_EQ(server.accept_errors[0].code, errc::handshake_failed);
        }
        // A member dialling a stranger: it refuses to complete, and the stranger gets no frame.
        auto m = co_await async_connect_link(stranger_server.address(), member, mesh, cfg);
        EXPECT_FALSE(m);
        if (!m) {
            EXPECT_EQ(m.error().code, errc::handshake_failed) << m.error().what();
        }
        co_await sleep_for(100ms);
        EXPECT_EQ(stranger_server.links.size(), 0u);
        EXPECT_TRUE(stranger_server.received.empty());
    });
    // The refusal is logged.
    bool logged = false;
    for (const auto& line : server.log) logged |= line.find("handshake") != std::string::npos;
    EXPECT_TRUE(logged);
}

TEST(TcpLink, CorruptedFrameClosesOnlyThatLink) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    TestNode server(io, mesh, true);
    server.start(io);
    auto proxy = std::make_shared<test::Proxy>(io.get_executor(), server.listener->port());
    proxy->start();
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    run_io(io, [&]() -> asio::awaitable<void> {
        const LinkConfig cfg;
        const PeerAddress proxy_address{"127.0.0.1", proxy->port()};
        auto via_proxy = co_await async_connect_link(proxy_address, a, mesh, cfg);
        auto direct = co_await async_connect_link(server.address(), b, mesh, cfg);
        EXPECT_TRUE(via_proxy && direct);
        if (!via_proxy || !direct) co_return;
        const Message before = Cancel{1, "before"};
        EXPECT_TRUE(co_await (*via_proxy)->async_send(before));
        EXPECT_TRUE(co_await (*via_proxy)->async_receive(5s));
        proxy->set_mode(test::Proxy::Mode::kCorruptNextClientChunk);
        const Message big = activation(64, 256);
        EXPECT_TRUE(co_await (*via_proxy)->async_send(big));
        // The server drops that link (decryption fails), so our side sees it close.
        auto r = co_await (*via_proxy)->async_receive(5s);
        EXPECT_FALSE(r);
        co_await sleep_for(100ms);
        EXPECT_FALSE((*via_proxy)->is_open());
        EXPECT_FALSE(server.receive_errors.empty());
        if (server.receive_errors.empty()) co_return;
        EXPECT_EQ(server.receive_errors[0].code, errc::decrypt_failed)
            << server.receive_errors[0].what();
        // The other link is unaffected.
        const Message after = Cancel{2, "after"};
        EXPECT_TRUE(co_await (*direct)->async_send(after));
        auto echo = co_await (*direct)->async_receive(5s);
        EXPECT_TRUE(echo);
        if (echo) {
            EXPECT_EQ(std::get<Cancel>(*echo).request_id, 2u);
        }
        // And the server logged why it closed the bad one.
        bool logged = false;
        for (const auto& line : server.log)
            logged |= line.find("authentication failed") != std::string::npos;
        EXPECT_TRUE(logged);
        proxy->stop();
    });
}

TEST(TcpLink, TruncatedStreamIsReported) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    TestNode server(io, mesh, true);
    server.start(io);
    auto proxy = std::make_shared<test::Proxy>(io.get_executor(), server.listener->port());
    proxy->start();
    const NodeKey a = NodeKey::generate();
    run_io(io, [&]() -> asio::awaitable<void> {
        const LinkConfig cfg;
        const PeerAddress proxy_address{"127.0.0.1", proxy->port()};
        auto link = co_await async_connect_link(proxy_address, a, mesh, cfg);
        EXPECT_TRUE(link);
        if (!link) co_return;
        proxy->set_mode(test::Proxy::Mode::kTruncateAndClose);
        const Message big = activation(64, 256);
        EXPECT_TRUE(co_await (*link)->async_send(big));
        co_await sleep_for(300ms);
        EXPECT_FALSE(server.receive_errors.empty());
        if (server.receive_errors.empty()) co_return;
        EXPECT_EQ(server.receive_errors[0].code, errc::bad_frame)
            << server.receive_errors[0].what();
        EXPECT_NE(server.receive_errors[0].message.find("truncated"), std::string::npos);
        proxy->stop();
    });
}

TEST(TcpLink, SilentPeerHitsTheIdleTimeout) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    TestNode server(io, mesh, false);
    server.config.keepalive_interval = 50ms;
    server.config.idle_timeout = 400ms;
    server.start(io);
    auto proxy = std::make_shared<test::Proxy>(io.get_executor(), server.listener->port());
    proxy->start();
    const NodeKey a = NodeKey::generate();
    run_io(io, [&]() -> asio::awaitable<void> {
        LinkConfig cfg;
        cfg.keepalive_interval = 50ms;
        cfg.idle_timeout = 400ms;
        const PeerAddress proxy_address{"127.0.0.1", proxy->port()};
        auto link = co_await async_connect_link(proxy_address, a, mesh, cfg);
        EXPECT_TRUE(link);
        if (!link) co_return;
        co_await sleep_for(500ms);
        EXPECT_TRUE((*link)->is_open());                 // keepalives flow: no idle close
        proxy->set_mode(test::Proxy::Mode::kBlackHole);  // packets vanish, no FIN, no RST
        const auto t = std::chrono::steady_clock::now();
        auto r = co_await (*link)->async_receive(5s);
        const auto waited = std::chrono::steady_clock::now() - t;
        EXPECT_FALSE(r);
        if (!r) {
            EXPECT_EQ(r.error().code, errc::timeout) << r.error().what();
        }
        EXPECT_LT(waited, 2s);
        EXPECT_FALSE((*link)->is_open());
        proxy->stop();
    });
}

TEST(TcpLink, PeerThatNeverAnswersTheHandshakeTimesOut) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    // Accepts TCP connections and then says nothing.
    asio::ip::tcp::acceptor mute(io, {asio::ip::make_address("127.0.0.1"), 0});
    std::vector<asio::ip::tcp::socket> held;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            for (;;) {
                auto awaited1_ = co_await mute.async_accept(kNoThrow);
                auto ec = std::move(std::get<0>(awaited1_));
                auto s = std::move(std::get<1>(awaited1_));
                if (ec) co_return;
                held.push_back(std::move(s));
            }
        },
        [](std::exception_ptr) {});
    TestNode server(io, mesh);
    server.config.handshake_timeout = 300ms;
    server.start(io);
    const NodeKey a = NodeKey::generate();
    run_io(io, [&]() -> asio::awaitable<void> {
        LinkConfig cfg;
        cfg.handshake_timeout = 300ms;
        const auto t = std::chrono::steady_clock::now();
        const PeerAddress mute_address{"127.0.0.1", mute.local_endpoint().port()};
        auto link = co_await async_connect_link(mute_address, a, mesh, cfg);
        const auto waited = std::chrono::steady_clock::now() - t;
        EXPECT_FALSE(link);
        if (!link) {
            EXPECT_EQ(link.error().code, errc::timeout) << link.error().what();
        }
        EXPECT_GE(waited, 250ms);
        EXPECT_LT(waited, 2s);
        // The other way round: a client that connects and says nothing is dropped by the server.
        asio::ip::tcp::socket silent(co_await asio::this_coro::executor);
        co_await silent.async_connect(
            {asio::ip::make_address("127.0.0.1"), server.listener->port()}, kNoThrow);
        co_await sleep_for(600ms);
        EXPECT_EQ(server.accept_errors.size(), 1u);
        if (!server.accept_errors.empty()) {
            EXPECT_EQ(server.accept_errors[0].code, errc::timeout);
        }
        mute.close();
    });
}

TEST(TcpLink, ConnectFailuresAreErrorsNotHangs) {
    asio::io_context io;
    const MeshCredentials mesh = MeshCredentials::generate();
    const NodeKey a = NodeKey::generate();
    run_io(
        io,
        [&]() -> asio::awaitable<void> {
            // Nothing listens on this port (we opened and closed it).
            std::uint16_t port = 0;
            {
                asio::ip::tcp::acceptor tmp(co_await asio::this_coro::executor,
                                            {asio::ip::make_address("127.0.0.1"), 0});
                port = tmp.local_endpoint().port();
            }
            const LinkConfig cfg;
            const PeerAddress closed_port{"127.0.0.1", port};
            auto refused = co_await async_connect_link(closed_port, a, mesh, cfg);
            EXPECT_FALSE(refused);
            if (!refused) {
                EXPECT_EQ(refused.error().code, errc::refused);
            }
            const PeerAddress nowhere{"no-such-host.invalid", 8178};
            auto unresolvable = co_await async_connect_link(nowhere, a, mesh, cfg);
            EXPECT_FALSE(unresolvable);
        },
        20s);
}

// The probe behind "a dropped link's process is gone": a bare connect, no handshake.
TEST(TcpLink, AProbeTellsAListenerFromAClosedPort) {
    asio::io_context io;
    run_io(
        io,
        [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            asio::ip::tcp::acceptor listening(ex, {asio::ip::make_address("127.0.0.1"), 0});
            std::uint16_t closed = 0;
            {
                asio::ip::tcp::acceptor tmp(ex, {asio::ip::make_address("127.0.0.1"), 0});
                closed = tmp.local_endpoint().port();
            }
            const PeerAddress there{"127.0.0.1", listening.local_endpoint().port()};
            auto answered = co_await async_probe_listener(there, 2s);
            EXPECT_TRUE(answered) << answered.error().what();
            const PeerAddress nobody{"127.0.0.1", closed};
            auto refused = co_await async_probe_listener(nobody, 2s);
            EXPECT_FALSE(refused);
            if (!refused) {
                EXPECT_EQ(refused.error().code, errc::refused) << refused.error().what();
            }
        },
        20s);
}

TEST(LoopbackLink, CarriesFramesThroughTheCodec) {
    asio::io_context io;
    NodeId x, y;
    x.bytes[0] = 1;
    y.bytes[0] = 2;
    auto [a, b] = make_loopback_pair(io.get_executor(), x, y);
    run_io(io, [&, a = a, b = b]() -> asio::awaitable<void> {
        EXPECT_EQ(a->peer().id, y);
        EXPECT_EQ(b->peer().id, x);
        const Message m = activation(4, 8);
        EXPECT_TRUE(co_await a->async_send(m));
        auto got = co_await b->async_receive(1s);
        EXPECT_TRUE(got && *got == m);
        auto none = co_await b->async_receive(50ms);
        EXPECT_FALSE(none);
        if (!none) {
            EXPECT_EQ(none.error().code, errc::timeout);
        }
        // Frames over the limits are refused, as on TCP.
        auto small_pair = make_loopback_pair(io.get_executor(), x, y, WireLimits{1024, 1024, 64});
        auto c = small_pair.first;
        const Message too_big = activation(16, 16);
        EXPECT_FALSE(co_await c->async_send(too_big));
        EXPECT_FALSE(c->is_open());
        a->close("done");
        auto closed = co_await b->async_receive(1s);
        EXPECT_FALSE(closed);
        if (!closed) {
            EXPECT_EQ(closed.error().code, errc::closed);
        }
    });
}

}  // namespace
}  // namespace brigade::mesh
