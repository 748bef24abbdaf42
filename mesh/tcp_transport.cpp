#include "mesh/tcp_transport.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <functional>

#include "mesh/handshake.hpp"
#include "mesh/rtt_estimator.hpp"
#include "mesh/secure_channel.hpp"

namespace brigade::mesh {
namespace asio = boost::asio;
using asio::awaitable;
using asio::ip::tcp;
using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kYieldOutboxBytes = 4u << 20;
// How long a locally closed link may take to send its queued frames and the Bye.
constexpr auto kByeDrainTimeout = std::chrono::seconds(1);

// Runs `on_fire` (which closes a socket or cancels a resolver) when a deadline passes. Pending
// operations then fail, which is how connect and handshake get their timeouts. Disarmed on
// destruction, so it never touches an object that has moved on.
class Watchdog {
public:
    Watchdog(const asio::any_io_executor& ex, Ms deadline, std::function<void()> on_fire)
        : timer_(ex), state_(std::make_shared<State>()) {
        state_->on_fire = std::move(on_fire);
        timer_.expires_after(deadline);
        timer_.async_wait([state = state_](boost::system::error_code ec) {
            if (ec || !state->armed) return;
            state->fired = true;
            state->on_fire();
        });
    }
    ~Watchdog() { disarm(); }
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    void disarm() {
        state_->armed = false;
        timer_.cancel();
    }
    bool fired() const { return state_->fired; }

private:
    struct State {
        bool armed = true;
        bool fired = false;
        std::function<void()> on_fire;
    };
    asio::steady_timer timer_;
    std::shared_ptr<State> state_;
};

std::uint64_t now_us() {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now().time_since_epoch())
            .count());
}

std::size_t message_bytes_estimate(const Message& m) {
    if (const auto* a = std::get_if<ActivationFrame>(&m)) return a->payload.size() + 256;
    if (const auto* r = std::get_if<RequestFrame>(&m)) return r->tokens.size() * 4 + 256;
    return 256;
}

awaitable<Result<void>> write_all(tcp::socket& s, ByteSpan bytes) {
    auto awaited_w1_ =
        co_await asio::async_write(s, asio::buffer(bytes.data(), bytes.size()), kNoThrow);
    auto ec = std::move(std::get<0>(awaited_w1_));
    if (ec) {
        Result<void> r_ = make_error(errc::io_error, "write failed: " + ec.message());
        co_return r_;
    }
    Result<void> ok;
    co_return ok;
}

awaitable<Result<void>> write_handshake_message(tcp::socket& s, ByteSpan m) {
    Bytes framed;
    framed.reserve(m.size() + 2);
    framed.push_back(static_cast<std::uint8_t>(m.size()));
    framed.push_back(static_cast<std::uint8_t>(m.size() >> 8));
    framed.insert(framed.end(), m.begin(), m.end());
    Result<void> r_ = co_await write_all(s, framed);
    co_return r_;
}

awaitable<Result<Bytes>> read_handshake_message(tcp::socket& s) {
    std::array<std::uint8_t, 2> len{};
    auto awaited1_ = co_await asio::async_read(s, asio::buffer(len), kNoThrow);
    auto ec = std::move(std::get<0>(awaited1_));
    if (ec) {
        {
            Result<Bytes> r_ =
                make_error(ec == asio::error::eof ? errc::closed : errc::io_error,
                           "connection ended during the handshake (" + ec.message() + ")");
            co_return r_;
        }
    }
    const std::size_t size =
        static_cast<std::size_t>(len[0]) | (static_cast<std::size_t>(len[1]) << 8);
    if (size == 0) {
        Result<Bytes> r_ = make_error(errc::handshake_failed, "empty handshake message");
        co_return r_;
    }
    Bytes body(size);  // at most 65535 bytes: the u16 bounds it
    auto awaited2_ = co_await asio::async_read(s, asio::buffer(body), kNoThrow);
    auto ec2 = std::move(std::get<0>(awaited2_));
    if (ec2) {
        {
            Result<Bytes> r_ = make_error(
                errc::closed, "connection ended during the handshake (" + ec2.message() + ")");
            co_return r_;
        }
    }
    Result<Bytes> r_ = std::move(body);
    co_return r_;
}

class TcpLinkCore : public std::enable_shared_from_this<TcpLinkCore> {
public:
    TcpLinkCore(tcp::socket socket, SecureChannel channel, LinkConfig config, LinkPeer peer)
        : socket_(std::move(socket)),
          channel_(std::move(channel)),
          config_(std::move(config)),
          peer_(std::move(peer)),
          recv_timer_(socket_.get_executor()),
          send_space_(socket_.get_executor()),
          writer_wake_(socket_.get_executor()),
          reader_space_(socket_.get_executor()),
          keepalive_timer_(socket_.get_executor()) {
        // Condition timers: never re-armed; cancel() wakes whoever waits on them.
        send_space_.expires_at(SteadyClock::time_point::max());
        writer_wake_.expires_at(SteadyClock::time_point::max());
        reader_space_.expires_at(SteadyClock::time_point::max());
        last_received_ = last_sent_ = SteadyClock::now();
    }

    void start() {
        auto self = shared_from_this();
        auto on_done = [self](std::exception_ptr e) {
            if (!e) return;
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& ex) {
                self->fail(
                    make_error(errc::io_error, std::string("link task failed: ") + ex.what()));
            }
        };
        asio::co_spawn(socket_.get_executor(), reader(), on_done);
        asio::co_spawn(socket_.get_executor(), writer(), on_done);
        asio::co_spawn(socket_.get_executor(), keepalive(), on_done);
    }

    // Not a coroutine: the message is boxed before it enters one (see async_connect_link).
    awaitable<Result<void>> send(Message m) {
        return send_boxed(std::make_unique<Message>(std::move(m)));
    }

    awaitable<Result<void>> send_boxed(std::unique_ptr<Message> m) {
        auto self = shared_from_this();
        while (!closed_ && outbox_.size() > config_.max_outbox_bytes) {
            // The keepalive task closes the link if the writer makes no progress for send_timeout.
            co_await send_space_.async_wait(kNoThrow);
        }
        if (closed_) {
            Result<void> r_ = close_error();
            co_return r_;
        }
        if (auto r = enqueue(*m); !r) {
            Result<void> r_ = r.error();
            co_return r_;
        }
        if (outbox_.size() > kYieldOutboxBytes) {
            // Let the writer, reader and keepalive run between big frames instead of sealing a
            // whole burst first.
            co_await asio::post(socket_.get_executor(), asio::use_awaitable);
        }
        Result<void> ok;
        co_return ok;
    }

    awaitable<Result<Message>> receive(Ms timeout) {
        auto self = shared_from_this();
        const auto deadline = SteadyClock::now() + timeout;
        for (;;) {
            if (!inbox_.empty()) {
                Message m = std::move(inbox_.front());
                inbox_.pop_front();
                inbox_bytes_ -= message_bytes_estimate(m);
                reader_space_.cancel();
                Result<Message> r_ = std::move(m);
                co_return r_;
            }
            if (closed_) {
                Result<Message> r_ = close_error();
                co_return r_;
            }
            if (SteadyClock::now() >= deadline) {
                {
                    Result<Message> r_ = make_error(
                        errc::timeout, "no frame from " + peer_.id.short_string() + " within " +
                                           std::to_string(timeout.count()) + " ms");
                    co_return r_;
                }
            }
            recv_timer_.expires_at(deadline);
            co_await recv_timer_.async_wait(kNoThrow);
        }
    }

    void close(std::string_view reason, bool send_bye) {
        if (closed_) return;
        Error error = make_error(errc::closed, "closed locally: " + std::string(reason));
        if (send_bye && channel_.seal(Bye{ByeReason::kShutdown, std::string(reason)}, outbox_)) {
            // The goodbye goes out after whatever is queued or being written (a keepalive, say),
            // then the writer closes the socket. Bounded: a peer that stops reading cannot keep
            // the socket open past kByeDrainTimeout.
            draining_ = true;
            mark_closed(std::move(error), false);
            auto self = shared_from_this();
            auto deadline = std::make_shared<asio::steady_timer>(socket_.get_executor());
            deadline->expires_after(kByeDrainTimeout);
            deadline->async_wait([self, deadline](boost::system::error_code) {
                boost::system::error_code ignored;
                self->socket_.close(ignored);
            });
            return;
        }
        mark_closed(std::move(error), true);
    }

    void fail(Error e) {
        if (closed_) return;
        log_to(config_.log, LogLevel::kWarn,
               "mesh link to " + peer_.id.short_string() + " (" + peer_.remote_host +
                   ") closed: " + e.what());
        mark_closed(std::move(e), true);
    }

    bool is_open() const { return !closed_; }
    const LinkPeer& peer() const { return peer_; }
    std::optional<std::chrono::microseconds> rtt() const { return rtt_.estimate(); }
    std::string close_reason() const { return close_error_ ? close_error_->what() : std::string(); }
    SteadyClock::time_point last_received() {
        // Bytes waiting in the kernel count: our reader may be the one that is late.
        boost::system::error_code ec;
        if (!closed_ && socket_.available(ec) > 0 && !ec) last_received_ = SteadyClock::now();
        return last_received_;
    }

private:
    Error close_error() const {
        return close_error_ ? *close_error_ : make_error(errc::closed, "link closed");
    }

    void mark_closed(Error e, bool close_socket) {
        closed_ = true;
        close_error_ = std::move(e);
        if (close_socket) {
            boost::system::error_code ignored;
            socket_.close(ignored);
        }
        recv_timer_.cancel();
        send_space_.cancel();
        writer_wake_.cancel();
        reader_space_.cancel();
        keepalive_timer_.cancel();
    }

    Result<void> enqueue(const Message& m) {
        if (auto r = channel_.seal(m, outbox_); !r) {
            fail(r.error());
            return r;
        }
        if (outbox_queued_at_ == SteadyClock::time_point{}) outbox_queued_at_ = SteadyClock::now();
        last_sent_ = SteadyClock::now();
        writer_wake_.cancel();
        return {};
    }

    void handle(Message m) {
        if (auto* hb = std::get_if<Heartbeat>(&m)) {
            if (!hb->reply) {
                (void)enqueue(Heartbeat{hb->seq, hb->sent_us, true});
            } else if (hb->sent_us <= now_us()) {
                rtt_.add(std::chrono::microseconds(now_us() - hb->sent_us));
            }
            return;
        }
        if (auto* bye = std::get_if<Bye>(&m)) {
            log_to(config_.log, LogLevel::kInfo,
                   "mesh peer " + peer_.id.short_string() + " said bye: " + bye->message);
            mark_closed(make_error(errc::closed, "peer said bye: " + bye->message), true);
            return;
        }
        inbox_bytes_ += message_bytes_estimate(m);
        inbox_.push_back(std::move(m));
        recv_timer_.cancel();
    }

    awaitable<void> reader() {
        auto self = shared_from_this();
        Bytes buf(64 * 1024);
        for (;;) {
            for (;;) {  // frames already decrypted (including any read with the peer's Hello)
                auto next = channel_.next();
                if (!next) {
                    fail(next.error());
                    co_return;
                }
                if (!*next) break;
                handle(std::move(**next));
                if (closed_) co_return;
            }
            while (!closed_ && inbox_bytes_ > config_.max_inbox_bytes) {
                co_await reader_space_.async_wait(kNoThrow);
            }
            if (closed_) co_return;
            auto awaited3_ = co_await socket_.async_read_some(asio::buffer(buf), kNoThrow);
            auto ec = std::move(std::get<0>(awaited3_));
            auto n = std::move(std::get<1>(awaited3_));
            if (closed_) co_return;
            if (ec) {
                if (ec == asio::error::eof && channel_.pending_bytes() == 0) {
                    fail(make_error(errc::closed, "peer closed the connection"));
                } else if (ec == asio::error::eof) {
                    fail(make_error(errc::bad_frame, "stream truncated inside a record or frame (" +
                                                         std::to_string(channel_.pending_bytes()) +
                                                         " bytes pending)"));
                } else {
                    fail(make_error(errc::io_error, "read failed: " + ec.message()));
                }
                co_return;
            }
            last_received_ = SteadyClock::now();
            if (auto f = channel_.feed(ByteSpan(buf.data(), n)); !f) {
                fail(f.error());
                co_return;
            }
        }
    }

    awaitable<void> writer() {
        auto self = shared_from_this();
        Bytes inflight;
        for (;;) {
            if (closed_ && !draining_) co_return;
            if (outbox_.empty()) {
                if (draining_) {  // the goodbye is out: close now
                    boost::system::error_code ignored;
                    socket_.close(ignored);
                    co_return;
                }
                co_await writer_wake_.async_wait(kNoThrow);
                continue;
            }
            inflight.swap(outbox_);
            outbox_.clear();
            outbox_queued_at_ = {};
            write_progress_ = SteadyClock::now();
            writing_ = true;
            send_space_.cancel();
            // In 1 MiB pieces, so the send timeout measures progress, not the time a 256 MiB
            // burst needs on a slow link.
            constexpr std::size_t kPiece = 1 << 20;
            for (std::size_t pos = 0; pos < inflight.size();) {
                const std::size_t n = std::min(kPiece, inflight.size() - pos);
                auto written = co_await asio::async_write(
                    socket_, asio::buffer(inflight.data() + pos, n), kNoThrow);
                if (std::get<0>(written)) {
                    writing_ = false;
                    fail(make_error(errc::io_error,
                                    "write failed: " + std::get<0>(written).message()));
                    boost::system::error_code ignored;
                    socket_.close(ignored);  // also when draining (`fail` is a no-op then)
                    co_return;
                }
                pos += n;
                write_progress_ = SteadyClock::now();
            }
            writing_ = false;
            inflight.clear();
        }
    }

    awaitable<void> keepalive() {
        auto self = shared_from_this();
        const Ms step =
            std::max(Ms(10), std::min(config_.keepalive_interval, config_.idle_timeout) / 4);
        for (;;) {
            keepalive_timer_.expires_after(step);
            co_await keepalive_timer_.async_wait(kNoThrow);
            if (closed_) co_return;
            const auto now = SteadyClock::now();
            // Bytes waiting in the kernel mean the peer is alive even if our reader has not run
            // (e.g. this thread spent seconds sealing a burst of activations).
            boost::system::error_code available_ec;
            if (socket_.available(available_ec) > 0 && !available_ec) last_received_ = now;
            if (now - last_received_ >= config_.idle_timeout) {
                fail(make_error(errc::timeout, "nothing received for " +
                                                   std::to_string(config_.idle_timeout.count()) +
                                                   " ms"));
                co_return;
            }
            // No write progress for send_timeout while bytes wait: the peer stopped reading.
            const bool waiting = writing_ || outbox_queued_at_ != SteadyClock::time_point{};
            const auto since = writing_ ? write_progress_ : outbox_queued_at_;
            if (waiting && now - since >= config_.send_timeout) {
                fail(make_error(errc::timeout, "peer stopped reading: a write waited over " +
                                                   std::to_string(config_.send_timeout.count()) +
                                                   " ms"));
                co_return;
            }
            if (now - last_sent_ >= config_.keepalive_interval) {
                (void)enqueue(Heartbeat{++heartbeat_seq_, now_us(), false});
            }
        }
    }

    tcp::socket socket_;
    SecureChannel channel_;
    LinkConfig config_;
    LinkPeer peer_;
    std::deque<Message> inbox_;
    std::size_t inbox_bytes_ = 0;
    Bytes outbox_;
    bool writing_ = false;
    bool draining_ = false;  // closed locally; the writer still sends the queued Bye
    bool closed_ = false;
    std::optional<Error> close_error_;
    SteadyClock::time_point last_received_;
    SteadyClock::time_point last_sent_;
    SteadyClock::time_point write_progress_;
    SteadyClock::time_point outbox_queued_at_{};
    RttEstimator rtt_;
    std::uint64_t heartbeat_seq_ = 0;
    asio::steady_timer recv_timer_;
    asio::steady_timer send_space_;
    asio::steady_timer writer_wake_;
    asio::steady_timer reader_space_;
    asio::steady_timer keepalive_timer_;
};

// The handle given to callers: releasing it closes the link (the core's tasks hold the core).
class TcpLink final : public Link {
public:
    explicit TcpLink(std::shared_ptr<TcpLinkCore> core) : core_(std::move(core)) {}
    ~TcpLink() override { core_->close("link released", true); }

    awaitable<Result<void>> async_send(Message m) override { return core_->send(std::move(m)); }
    awaitable<Result<Message>> async_receive(Ms timeout) override {
        return core_->receive(timeout);
    }
    void close(std::string_view reason) override { core_->close(reason, true); }
    bool is_open() const override { return core_->is_open(); }
    const LinkPeer& peer() const override { return core_->peer(); }
    std::optional<std::chrono::microseconds> rtt() const override { return core_->rtt(); }
    std::string close_reason() const override { return core_->close_reason(); }
    std::chrono::steady_clock::time_point last_received() override {
        return core_->last_received();
    }

private:
    std::shared_ptr<TcpLinkCore> core_;
};

awaitable<Result<std::shared_ptr<Link>>> establish(tcp::socket socket, LinkHandshake::Role role,
                                                   const NodeKey& identity,
                                                   const MeshCredentials& mesh,
                                                   std::unique_ptr<LinkConfig> config_box) {
    LinkConfig& config = *config_box;
    boost::system::error_code ep_ec;
    const auto endpoint = socket.remote_endpoint(ep_ec);
    const std::string remote = ep_ec ? std::string("?") : endpoint.address().to_string();
    socket.set_option(tcp::no_delay(true), ep_ec);  // frames are small and latency-bound

    Watchdog dog(socket.get_executor(), config.handshake_timeout, [&socket] {
        boost::system::error_code ignored;
        socket.close(ignored);
    });
    bool silent_close = false;  // the peer closed before sending a byte: a liveness probe
    auto failed = [&](Error e) -> Result<std::shared_ptr<Link>> {
        if (dog.fired()) {
            e = make_error(errc::timeout, "handshake with " + remote + " did not finish within " +
                                              std::to_string(config.handshake_timeout.count()) +
                                              " ms");
        }
        boost::system::error_code ignored;
        socket.close(ignored);
        log_to(config.log, silent_close ? LogLevel::kDebug : LogLevel::kWarn,
               "mesh handshake with " + remote + " failed: " + e.what());
        return e;
    };

    LinkHandshake hs(role, identity, mesh.secret);
    auto first = hs.start();
    if (!first) {
        Result<std::shared_ptr<Link>> r_ = failed(first.error());
        co_return r_;
    }
    if (!first->empty()) {
        if (auto w = co_await write_handshake_message(socket, *first); !w) {
            Result<std::shared_ptr<Link>> r_ = failed(w.error());
            co_return r_;
        }
    }
    while (!hs.done()) {
        auto msg = co_await read_handshake_message(socket);
        if (!msg) {
            Error e = msg.error();
            if (role == LinkHandshake::Role::kInitiator && hs.messages_received() >= 1) {
                // The responder closes without a word when msg3 fails: the psk did not match.
                e.code = errc::handshake_failed;
                e.message += " (the peer rejected us: wrong mesh secret?)";
            }
            silent_close = role == LinkHandshake::Role::kResponder && hs.messages_received() == 0 &&
                           e.code == errc::closed;
            {
                Result<std::shared_ptr<Link>> r_ = failed(e);
                co_return r_;
            }
        }
        auto reply = hs.on_message(*msg);
        if (!reply) {
            Result<std::shared_ptr<Link>> r_ = failed(reply.error());
            co_return r_;
        }
        if (!reply->empty()) {
            if (auto w = co_await write_handshake_message(socket, *reply); !w) {
                Result<std::shared_ptr<Link>> r_ = failed(w.error());
                co_return r_;
            }
        }
    }
    HandshakeOutcome outcome = hs.take_outcome();
    SecureChannel channel(outcome.send, outcome.recv, config.limits);

    const Hello hello{kProtocolMajor,     kProtocolMinor,  config.capabilities, identity.id(),
                      config.listen_port, config.software, config.incarnation};
    Bytes wire;
    if (auto s = channel.seal(hello, wire); !s) {
        Result<std::shared_ptr<Link>> r_ = failed(s.error());
        co_return r_;
    }
    if (auto w = co_await write_all(socket, wire); !w) {
        Result<std::shared_ptr<Link>> r_ = failed(w.error());
        co_return r_;
    }

    std::optional<Message> first_frame;
    std::array<std::uint8_t, 4096> buf{};
    while (!first_frame) {
        auto next = channel.next();
        if (!next) {
            Result<std::shared_ptr<Link>> r_ = failed(next.error());
            co_return r_;
        }
        if (*next) {
            first_frame = std::move(**next);
            break;
        }
        auto awaited5_ = co_await socket.async_read_some(asio::buffer(buf), kNoThrow);
        auto ec = std::move(std::get<0>(awaited5_));
        auto n = std::move(std::get<1>(awaited5_));
        if (ec) {
            Result<std::shared_ptr<Link>> r_ =
                failed(make_error(errc::closed, "connection ended before Hello: " + ec.message()));
            co_return r_;
        }
        if (auto f = channel.feed(ByteSpan(buf.data(), n)); !f) {
            Result<std::shared_ptr<Link>> r_ = failed(f.error());
            co_return r_;
        }
    }
    const Hello* peer_hello = std::get_if<Hello>(&*first_frame);
    if (peer_hello == nullptr) {
        {
            Result<std::shared_ptr<Link>> r_ =
                failed(make_error(errc::bad_frame, "first frame is not Hello"));
            co_return r_;
        }
    }
    if (peer_hello->major != kProtocolMajor) {
        {
            Result<std::shared_ptr<Link>> r_ = failed(make_error(
                errc::bad_version, "peer speaks protocol " + std::to_string(peer_hello->major) +
                                       "." + std::to_string(peer_hello->minor)));
            co_return r_;
        }
    }
    if (peer_hello->node_id != outcome.peer_id) {
        {
            Result<std::shared_ptr<Link>> r_ = failed(make_error(
                errc::bad_identity, "Hello names a node id the handshake did not prove"));
            co_return r_;
        }
    }
    dog.disarm();

    LinkPeer peer;
    peer.id = outcome.peer_id;
    peer.key = outcome.peer_key;
    peer.hello = *peer_hello;
    peer.remote_host = remote;
    peer.capabilities = peer_hello->capabilities & config.capabilities;
    log_to(config.log, LogLevel::kInfo,
           "mesh link up with " + peer.id.short_string() + " at " + remote + " (" +
               peer_hello->software + ", protocol " + std::to_string(peer_hello->major) + "." +
               std::to_string(peer_hello->minor) + ")");
    auto core = std::make_shared<TcpLinkCore>(std::move(socket), std::move(channel),
                                              std::move(config), std::move(peer));
    core->start();
    {
        Result<std::shared_ptr<Link>> r_ =
            std::shared_ptr<Link>(std::make_shared<TcpLink>(std::move(core)));
        co_return r_;
    }
}

// Resolves and connects, each within `timeout`; errc::refused when nothing listens there.
awaitable<Result<tcp::socket>> tcp_connect(const PeerAddress& address, Ms timeout) {
    using R = Result<tcp::socket>;
    auto ex = co_await asio::this_coro::executor;
    const std::string where = address.to_string();
    tcp::resolver resolver(ex);
    Watchdog resolve_dog(ex, timeout, [&resolver] { resolver.cancel(); });
    auto resolved =
        co_await resolver.async_resolve(address.host, std::to_string(address.port), kNoThrow);
    resolve_dog.disarm();
    if (std::get<0>(resolved)) {
        R r_ = make_error(resolve_dog.fired() ? errc::timeout : errc::io_error,
                          "cannot resolve " + where + ": " + std::get<0>(resolved).message());
        co_return r_;
    }
    tcp::socket socket(ex);
    Watchdog connect_dog(ex, timeout, [&socket] {
        boost::system::error_code ignored;
        socket.close(ignored);
    });
    auto connected = co_await asio::async_connect(socket, std::get<1>(resolved), kNoThrow);
    connect_dog.disarm();
    if (std::get<0>(connected)) {
        R r_ = connect_dog.fired()
                   ? make_error(errc::timeout, "connect to " + where + " timed out after " +
                                                   std::to_string(timeout.count()) + " ms")
                   : make_error(
                         std::get<0>(connected) == asio::error::connection_refused ? errc::refused
                                                                                   : errc::io_error,
                         "cannot connect to " + where + ": " + std::get<0>(connected).message());
        co_return r_;
    }
    R r_ = std::move(socket);
    co_return r_;
}

struct ConnectArgs {
    PeerAddress address;
    LinkConfig config;
};

awaitable<Result<std::shared_ptr<Link>>> connect_impl(std::unique_ptr<ConnectArgs> args,
                                                      const NodeKey& identity,
                                                      const MeshCredentials& mesh) {
    auto socket = co_await tcp_connect(args->address, args->config.connect_timeout);
    if (!socket) {
        Result<std::shared_ptr<Link>> r_ = socket.error();
        co_return r_;
    }
    auto config = std::make_unique<LinkConfig>(std::move(args->config));
    Result<std::shared_ptr<Link>> r_ = co_await establish(
        std::move(*socket), LinkHandshake::Role::kInitiator, identity, mesh, std::move(config));
    co_return r_;
}

awaitable<Result<void>> probe_impl(std::unique_ptr<PeerAddress> address, Ms timeout) {
    auto socket = co_await tcp_connect(*address, timeout);
    if (!socket) {
        Result<void> r_ = socket.error();
        co_return r_;
    }
    boost::system::error_code ignored;
    socket->close(ignored);
    Result<void> ok;
    co_return ok;
}

}  // namespace

// Coroutine parameters here are only references, sockets and smart pointers: with GCC 12, a
// by-value coroutine parameter holding a short (SSO) std::string was destroyed from a relocated
// copy ("free(): invalid pointer" under ASan). The public entry points are plain functions that
// box their arguments.
awaitable<Result<std::shared_ptr<Link>>> async_connect_link(PeerAddress address,
                                                            const NodeKey& identity,
                                                            const MeshCredentials& mesh,
                                                            LinkConfig config) {
    return connect_impl(
        std::make_unique<ConnectArgs>(ConnectArgs{std::move(address), std::move(config)}), identity,
        mesh);
}

awaitable<Result<void>> async_probe_listener(PeerAddress address, Ms timeout) {
    return probe_impl(std::make_unique<PeerAddress>(std::move(address)), timeout);
}

awaitable<Result<std::shared_ptr<Link>>> async_accept_link(tcp::socket socket,
                                                           const NodeKey& identity,
                                                           const MeshCredentials& mesh,
                                                           LinkConfig config) {
    return establish(std::move(socket), LinkHandshake::Role::kResponder, identity, mesh,
                     std::make_unique<LinkConfig>(std::move(config)));
}

Result<std::unique_ptr<TcpListener>> TcpListener::open(asio::any_io_executor ex,
                                                       const std::string& host,
                                                       std::uint16_t port) {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(host, ec);
    if (ec)
        return make_error(errc::invalid_argument,
                          "bad listen address '" + host + "': " + ec.message());
    tcp::acceptor acceptor(ex);
    const tcp::endpoint endpoint(address, port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        return make_error(errc::io_error, "cannot listen on " + host + ":" + std::to_string(port) +
                                              ": " + ec.message());
    }
    return std::unique_ptr<TcpListener>(new TcpListener(std::move(acceptor)));
}

awaitable<Result<tcp::socket>> TcpListener::async_accept() {
    auto awaited7_ = co_await acceptor_.async_accept(kNoThrow);
    auto ec = std::move(std::get<0>(awaited7_));
    auto socket = std::move(std::get<1>(awaited7_));
    if (ec) {
        Result<tcp::socket> r_ = make_error(errc::io_error, "accept failed: " + ec.message());
        co_return r_;
    }
    Result<tcp::socket> r_ = std::move(socket);
    co_return r_;
}

std::uint16_t TcpListener::port() const {
    boost::system::error_code ec;
    return acceptor_.local_endpoint(ec).port();
}

void TcpListener::close() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
}

}  // namespace brigade::mesh
