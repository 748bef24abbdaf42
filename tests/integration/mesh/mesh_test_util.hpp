#pragma once
// Helpers for the mesh integration tests: run coroutines on an io_context with a hard time
// limit, and a TCP proxy that can corrupt, cut or black-hole a connection.

#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "mesh/tcp_transport.hpp"

namespace brigade::mesh::test {

namespace asio = boost::asio;
using asio::awaitable;
using asio::ip::tcp;
inline constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

// Runs `body` to completion (or fails the test after `limit`), then stops the io_context.
inline void run_io(asio::io_context& io, std::function<awaitable<void>()> body,
                   std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    bool done = false;
    std::exception_ptr error;
    asio::co_spawn(io, body(), [&](std::exception_ptr e) {
        done = true;
        error = e;
        io.stop();
    });
    io.run_for(limit);
    ASSERT_TRUE(done) << "test body did not finish within " << limit.count() << " ms";
    if (error) std::rethrow_exception(error);
}

inline awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(kNoThrow);
}

// Forwards one connection to `target`. Modes are switched by the test at any time.
class Proxy : public std::enable_shared_from_this<Proxy> {
public:
    enum class Mode { kForward, kCorruptNextClientChunk, kBlackHole, kTruncateAndClose };

    Proxy(asio::any_io_executor ex, std::uint16_t target_port)
        : acceptor_(ex, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
          target_port_(target_port) {}

    std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
    void set_mode(Mode m) { mode_ = m; }
    std::size_t client_bytes() const { return client_bytes_; }

    void start() {
        auto self = shared_from_this();
        asio::co_spawn(acceptor_.get_executor(), self->run(), [self](std::exception_ptr) {});
    }

    void stop() {
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        if (a_) a_->close(ignored);
        if (b_) b_->close(ignored);
    }

private:
    awaitable<void> run() {
        auto self = shared_from_this();
        auto awaited1_ = co_await acceptor_.async_accept(kNoThrow);
        auto ec = std::move(std::get<0>(awaited1_));
        auto a = std::move(std::get<1>(awaited1_));
        if (ec) co_return;
        a_ = std::make_shared<tcp::socket>(std::move(a));
        b_ = std::make_shared<tcp::socket>(acceptor_.get_executor());
        auto awaited2_ = co_await b_->async_connect(
            tcp::endpoint(asio::ip::make_address("127.0.0.1"), target_port_), kNoThrow);
        auto ec2 = std::move(std::get<0>(awaited2_));
        if (ec2) co_return;
        asio::co_spawn(acceptor_.get_executor(), pump(a_, b_, true), [self](std::exception_ptr) {});
        asio::co_spawn(acceptor_.get_executor(), pump(b_, a_, false),
                       [self](std::exception_ptr) {});
    }

    awaitable<void> pump(std::shared_ptr<tcp::socket> from, std::shared_ptr<tcp::socket> to,
                         bool client_side) {
        auto self = shared_from_this();
        std::vector<std::uint8_t> buf(16384);
        for (;;) {
            auto awaited3_ = co_await from->async_read_some(asio::buffer(buf), kNoThrow);
            auto ec = std::move(std::get<0>(awaited3_));
            auto n = std::move(std::get<1>(awaited3_));
            if (ec) break;
            if (mode_ == Mode::kBlackHole) continue;  // swallow: like a pulled cable
            if (client_side) client_bytes_ += n;
            if (client_side && mode_ == Mode::kCorruptNextClientChunk) {
                buf[n / 2] ^= 0x10;
                mode_ = Mode::kForward;
            }
            if (client_side && mode_ == Mode::kTruncateAndClose) {
                n = std::max<std::size_t>(1, n / 2);
                co_await asio::async_write(*to, asio::buffer(buf.data(), n), kNoThrow);
                boost::system::error_code ignored;
                to->shutdown(tcp::socket::shutdown_send, ignored);
                break;
            }
            auto awaited4_ = co_await asio::async_write(*to, asio::buffer(buf.data(), n), kNoThrow);
            auto wec = std::move(std::get<0>(awaited4_));
            if (wec) break;
        }
        // A black hole is a pulled cable: one side giving up must not reach the other as a
        // FIN either (it did, and a test of the other side's idle timeout then saw "peer
        // closed the connection" whenever the far side's identical timeout fired first).
        if (mode_ != Mode::kTruncateAndClose && mode_ != Mode::kBlackHole) {
            boost::system::error_code ignored;
            to->shutdown(tcp::socket::shutdown_send, ignored);
        }
    }

    tcp::acceptor acceptor_;
    std::uint16_t target_port_;
    std::shared_ptr<tcp::socket> a_;
    std::shared_ptr<tcp::socket> b_;
    Mode mode_ = Mode::kForward;
    std::size_t client_bytes_ = 0;
};

}  // namespace brigade::mesh::test
