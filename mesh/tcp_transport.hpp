#pragma once
// Links over TCP (Boost.Asio): connect or accept, run the Noise handshake (handshake.hpp) with
// length-prefixed messages, exchange Hello inside the encrypted channel, then carry frames in
// encrypted records (secure_channel.hpp). Every wait has a deadline (LinkConfig); a peer that
// stalls, lies or tampers gets its link closed with a log line, and nothing else is affected.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>

#include "mesh/transport.hpp"

namespace brigade::mesh {

// Dials `address` and returns an authenticated link to the node there.
boost::asio::awaitable<Result<std::shared_ptr<Link>>> async_connect_link(
    PeerAddress address, const NodeKey& identity, const MeshCredentials& mesh, LinkConfig config);

// Whether anything listens at `address`: a TCP connect (within `timeout`), closed at once
// without a handshake. errc::refused: the host answered that nothing listens there.
boost::asio::awaitable<Result<void>> async_probe_listener(PeerAddress address,
                                                          std::chrono::milliseconds timeout);

// Runs the responder side on an accepted socket.
boost::asio::awaitable<Result<std::shared_ptr<Link>>> async_accept_link(
    boost::asio::ip::tcp::socket socket, const NodeKey& identity, const MeshCredentials& mesh,
    LinkConfig config);

// A listening socket. Accept raw sockets here and hand each to async_accept_link in its own
// coroutine, so a slow stranger never delays the next connection.
class TcpListener {
public:
    // Port 0 picks a free port (tests); see port().
    static Result<std::unique_ptr<TcpListener>> open(boost::asio::any_io_executor ex,
                                                     const std::string& host, std::uint16_t port);
    boost::asio::awaitable<Result<boost::asio::ip::tcp::socket>> async_accept();
    std::uint16_t port() const;
    void close();

private:
    explicit TcpListener(boost::asio::ip::tcp::acceptor acceptor)
        : acceptor_(std::move(acceptor)) {}
    boost::asio::ip::tcp::acceptor acceptor_;
};

}  // namespace brigade::mesh
