#include "mesh/loopback_transport.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <memory>

namespace brigade::mesh {
namespace asio = boost::asio;
using asio::awaitable;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

struct Pipe {
    struct End {
        explicit End(const asio::any_io_executor& ex) : timer(ex) {}
        std::deque<Message> inbox;
        asio::steady_timer timer;
        LinkPeer peer;  // who is at the other end
    };
    Pipe(const asio::any_io_executor& ex, WireLimits l) : ends{End(ex), End(ex)}, limits(l) {}
    End ends[2];
    WireLimits limits;
    bool closed = false;
    std::string reason;

    void close(std::string why) {
        if (closed) return;
        closed = true;
        reason = std::move(why);
        ends[0].timer.cancel();
        ends[1].timer.cancel();
    }
};

class LoopbackLink final : public Link {
public:
    LoopbackLink(std::shared_ptr<Pipe> pipe, int side) : pipe_(std::move(pipe)), side_(side) {}
    ~LoopbackLink() override { pipe_->close("link released"); }

    // A plain function handing a named object to the coroutine (see tcp_transport.cpp on GCC 12).
    awaitable<Result<void>> async_send(Message m) override {
        return send_impl(std::make_unique<Message>(std::move(m)));
    }

private:
    awaitable<Result<void>> send_impl(std::unique_ptr<Message> m) {
        if (pipe_->closed) {
            Result<void> r_ = make_error(errc::closed, pipe_->reason);
            co_return r_;
        }
        // Round trip through the codec, as a TCP link would.
        FrameDecoder decoder(pipe_->limits);
        decoder.feed(encode_frame(*m));
        auto decoded = decoder.next();
        if (!decoded || !*decoded) {
            const std::string why = decoded ? "frame did not decode" : decoded.error().what();
            pipe_->close("bad frame: " + why);
            {
                Result<void> r_ = make_error(errc::bad_frame, why);
                co_return r_;
            }
        }
        Pipe::End& other = pipe_->ends[1 - side_];
        other.inbox.push_back(std::move(**decoded));
        other.timer.cancel();
        Result<void> ok;
        co_return ok;
    }

public:
    awaitable<Result<Message>> async_receive(std::chrono::milliseconds timeout) override {
        auto pipe = pipe_;  // keeps the pipe alive across suspension
        Pipe::End& mine = pipe->ends[side_];
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            if (!mine.inbox.empty()) {
                Message m = std::move(mine.inbox.front());
                mine.inbox.pop_front();
                Result<Message> r_ = std::move(m);
                co_return r_;
            }
            if (pipe->closed) {
                Result<Message> r_ = make_error(errc::closed, pipe->reason);
                co_return r_;
            }
            if (std::chrono::steady_clock::now() >= deadline) {
                {
                    Result<Message> r_ =
                        make_error(errc::timeout,
                                   "no frame within " + std::to_string(timeout.count()) + " ms");
                    co_return r_;
                }
            }
            mine.timer.expires_at(deadline);
            co_await mine.timer.async_wait(kNoThrow);
        }
    }

    void close(std::string_view reason) override {
        pipe_->close("closed locally: " + std::string(reason));
    }
    bool is_open() const override { return !pipe_->closed; }
    const LinkPeer& peer() const override { return pipe_->ends[side_].peer; }
    std::optional<std::chrono::microseconds> rtt() const override {
        return std::chrono::microseconds(0);
    }
    // In one process a peer is never silent while its end is open.
    std::chrono::steady_clock::time_point last_received() override {
        return std::chrono::steady_clock::now();
    }
    std::string close_reason() const override {
        return pipe_->closed ? pipe_->reason : std::string();
    }

private:
    std::shared_ptr<Pipe> pipe_;
    int side_;
};

}  // namespace

std::pair<std::shared_ptr<Link>, std::shared_ptr<Link>> make_loopback_pair(
    const asio::any_io_executor& ex, const NodeId& a, const NodeId& b, WireLimits limits) {
    auto pipe = std::make_shared<Pipe>(ex, limits);
    const std::uint64_t caps = kCapActivationsBf16 | kCapActivationsF32 | kCapPipelineStage;
    pipe->ends[0].peer.id = b;
    pipe->ends[0].peer.hello = Hello{kProtocolMajor, kProtocolMinor, caps, b, 0, "loopback"};
    pipe->ends[0].peer.capabilities = caps;
    pipe->ends[1].peer.id = a;
    pipe->ends[1].peer.hello = Hello{kProtocolMajor, kProtocolMinor, caps, a, 0, "loopback"};
    pipe->ends[1].peer.capabilities = caps;
    return {std::make_shared<LoopbackLink>(pipe, 0), std::make_shared<LoopbackLink>(pipe, 1)};
}

}  // namespace brigade::mesh
