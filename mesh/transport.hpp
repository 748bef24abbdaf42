#pragma once
// `Link`: a connection to one peer that carries plaintext `Message`s. Encryption, keepalives and
// timeouts live inside the implementations (TCP: tcp_transport.hpp; in-process:
// loopback_transport.hpp); callers only ever see plaintext frames from an authenticated peer.
//
// Threading: a link belongs to one io_context and must be used from the thread running it.
// One coroutine at a time may wait in `async_receive`; any number may call `async_send` (frames
// are encrypted and queued in call order).
//
// GCC 12 pitfall (seen here as "free(): invalid pointer" under ASan): inside a coroutine, do not
// pass braced-init or implicitly converted temporaries to a call you `co_await`, e.g.
//     co_await link->async_send(Cancel{id, ""});                 // crashes with GCC 12.2
//     co_await async_connect_link({"10.0.0.2", 8178}, key, mesh, {});  // crashes too
// Bind them to named objects first (`const Message m = Cancel{id, ""}; co_await
// link->async_send(m);`). Our own coroutines also take only references, sockets and smart pointers
// as parameters, for the same reason.

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "mesh/errors.hpp"
#include "mesh/identity.hpp"
#include "mesh/log.hpp"
#include "mesh/messages.hpp"
#include "mesh/wire.hpp"

namespace brigade::mesh {

struct LinkConfig {
    WireLimits limits;
    std::chrono::milliseconds connect_timeout{5000};     // TCP connect (after name resolution)
    std::chrono::milliseconds handshake_timeout{5000};   // Noise handshake + Hello exchange
    std::chrono::milliseconds keepalive_interval{1000};  // heartbeat when nothing sent this long
    std::chrono::milliseconds idle_timeout{6000};        // close when nothing received this long
    std::chrono::milliseconds send_timeout{30000};       // a queued frame must be written by then
    std::size_t max_inbox_bytes = 512u << 20;            // unread frames held before reading pauses
    std::size_t max_outbox_bytes = 512u << 20;           // unsent bytes before async_send waits
    std::uint64_t capabilities = kCapActivationsBf16 | kCapActivationsF32 | kCapPipelineStage;
    std::uint16_t listen_port = 0;
    std::string software = "brigade/0.1.0";
    std::uint64_t incarnation = 0;  // sent in Hello (see there)
    LogSink log;
};

struct LinkPeer {
    NodeId id;
    Ed25519PublicKey key{};
    Hello hello;                     // the peer's Hello (version, capabilities, listen port)
    std::string remote_host;         // address we see it at ("" for loopback links)
    std::uint64_t capabilities = 0;  // AND of both sides
};

class Link {
public:
    virtual ~Link() = default;

    // Encrypts and queues `m`. Waits only when the outbox is over its limit (TCP backpressure),
    // up to send_timeout; an error means the link is closed.
    virtual boost::asio::awaitable<Result<void>> async_send(Message m) = 0;
    // The next frame (keepalives are handled inside). errc::timeout when nothing came within
    // `timeout` (the link stays open); any other error means the link is closed, and why.
    virtual boost::asio::awaitable<Result<Message>> async_receive(
        std::chrono::milliseconds timeout) = 0;
    // Sends Bye (best effort) and closes. Idempotent.
    virtual void close(std::string_view reason) = 0;
    virtual bool is_open() const = 0;
    virtual const LinkPeer& peer() const = 0;
    // Round trip as heartbeats measure it (the least of the recent samples: see RttEstimator),
    // if one completed.
    virtual std::optional<std::chrono::microseconds> rtt() const = 0;
    // Why the link closed (empty while open).
    virtual std::string close_reason() const = 0;
    // When bytes from the peer last arrived (keepalives included, and bytes not read yet): the
    // peer was alive then. Not const: it may look at the socket.
    virtual std::chrono::steady_clock::time_point last_received() = 0;
};

}  // namespace brigade::mesh
