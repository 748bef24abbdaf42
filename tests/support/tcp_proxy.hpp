#pragma once
// A loopback TCP forwarder for tests that tamper with a link: listens on 127.0.0.1 (any free
// port), connects each accepted client to `upstream_port`, and pumps bytes both ways on a
// thread of its own. Armed with `corrupt_next_upstream_byte`, it flips one bit of the next byte
// that goes from a client to the upstream (inside an encrypted record, once the handshake is
// over) and leaves everything else as it is; `corrupt_next_downstream_byte` does the same the
// other way.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace brigade::test {

class TcpProxy {
public:
    explicit TcpProxy(int upstream_port);
    ~TcpProxy();  // stops the thread and closes every socket
    TcpProxy(const TcpProxy&) = delete;
    TcpProxy& operator=(const TcpProxy&) = delete;

    int port() const { return port_; }  // 0 when it could not listen
    // Connections accepted so far, and how many of them are still open at both ends.
    int accepted() const { return accepted_.load(); }
    int open_connections() const { return open_.load(); }
    // Bytes forwarded client -> upstream, over all connections.
    std::uint64_t upstream_bytes() const { return upstream_bytes_.load(); }
    void corrupt_next_upstream_byte() { corrupt_[0].store(true); }
    void corrupt_next_downstream_byte() { corrupt_[1].store(true); }
    bool corrupted() const { return corrupted_done_.load(); }
    // Seconds from the corruption until that connection was closed by either end (<0: not yet).
    double closed_after_corruption_s() const;

private:
    struct Pair {
        int client = -1;
        int upstream = -1;
        bool tampered = false;
    };
    void run();
    void close_pair(Pair& p);

    int upstream_port_;
    int listen_fd_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<int> accepted_{0};
    std::atomic<int> open_{0};
    std::atomic<std::uint64_t> upstream_bytes_{0};
    std::atomic<bool> corrupt_[2] = {false, false};  // [0] client -> upstream, [1] back
    std::atomic<bool> corrupted_done_{false};
    mutable std::mutex mutex_;
    std::chrono::steady_clock::time_point corrupted_at_;
    std::chrono::steady_clock::time_point tampered_closed_at_;
    bool tampered_closed_ = false;
    std::vector<Pair> pairs_;  // the proxy thread's only
};

}  // namespace brigade::test
