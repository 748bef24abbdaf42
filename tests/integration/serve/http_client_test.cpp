// The node's HTTP client (brigade chat / status, the tests) gives up on a silent server after
// its deadline instead of hanging, and survives signals arriving on its thread.
#include "node/http_client.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <thread>

namespace brigade::node {
namespace {

using tcp = boost::asio::ip::tcp;

TEST(HttpClient, SilentServerTimesOut) {
    boost::asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    const auto port = acceptor.local_endpoint().port();
    tcp::socket held(io);
    std::thread server([&] { acceptor.accept(held); });  // accepts, then never answers

    HttpUrl url{"127.0.0.1", std::to_string(port), ""};
    HttpRequest request;
    request.timeout = std::chrono::milliseconds(300);
    const auto t0 = std::chrono::steady_clock::now();
    auto response = http_request(url, request);
    const auto waited = std::chrono::steady_clock::now() - t0;
    server.join();
    ASSERT_FALSE(response);
    EXPECT_NE(response.error().message.find("timed out"), std::string::npos)
        << response.error().message;
    EXPECT_LT(waited, std::chrono::seconds(10));
}

TEST(HttpClient, SignalsOnTheClientThreadDoNotFailTheRequest) {
    boost::asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    const auto port = acceptor.local_endpoint().port();
    std::thread server([&] {
        tcp::socket s(io);
        acceptor.accept(s);
        char buf[4096];
        boost::system::error_code ec;
        s.read_some(boost::asio::buffer(buf), ec);  // the request
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        const std::string reply =
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
        boost::asio::write(s, boost::asio::buffer(reply), ec);
    });
    // SIGCHLD (a child process exiting) interrupts blocking system calls on this thread.
    struct sigaction action {};
    action.sa_handler = [](int) {};
    struct sigaction previous {};
    sigaction(SIGCHLD, &action, &previous);
    const pthread_t client = pthread_self();
    std::thread signaller([client] {
        for (int i = 0; i < 4; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(80));
            pthread_kill(client, SIGCHLD);
        }
    });
    HttpUrl url{"127.0.0.1", std::to_string(port), ""};
    HttpRequest request;
    request.timeout = std::chrono::seconds(5);
    auto response = http_request(url, request);
    signaller.join();
    server.join();
    sigaction(SIGCHLD, &previous, nullptr);
    ASSERT_TRUE(response) << response.error().message;
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "ok");
}

}  // namespace
}  // namespace brigade::node
