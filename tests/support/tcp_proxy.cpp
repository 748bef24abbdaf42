#include "tests/support/tcp_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace brigade::test {
namespace {

int connect_loopback(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

}  // namespace

TcpProxy::TcpProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        pipe2(wake_, O_CLOEXEC) != 0) {
        return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
}

TcpProxy::~TcpProxy() {
    stop_.store(true);
    if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
    if (thread_.joinable()) thread_.join();
    for (auto& p : pairs_) close_pair(p);
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
        if (fd >= 0) close(fd);
    }
}

double TcpProxy::closed_after_corruption_s() const {
    std::lock_guard lock(mutex_);
    if (!tampered_closed_) return -1;
    return std::chrono::duration<double>(tampered_closed_at_ - corrupted_at_).count();
}

void TcpProxy::close_pair(Pair& p) {
    if (p.client < 0) return;
    close(p.client);
    close(p.upstream);
    p.client = p.upstream = -1;
    open_.fetch_sub(1);
    if (p.tampered) {
        std::lock_guard lock(mutex_);
        tampered_closed_ = true;
        tampered_closed_at_ = std::chrono::steady_clock::now();
    }
}

void TcpProxy::run() {
    char buf[65536];
    while (!stop_.load()) {
        std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
        for (const auto& p : pairs_) {
            fds.push_back({p.client, POLLIN, 0});
            fds.push_back({p.upstream, POLLIN, 0});
        }
        if (poll(fds.data(), fds.size(), 200) <= 0) continue;
        // Only the pairs polled above have entries in fds: one accepted below waits for the
        // next round (AddressSanitizer caught the loop reading past fds for it).
        const std::size_t polled = pairs_.size();
        if (fds[0].revents & POLLIN) {
            const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client >= 0) {
                const int upstream = connect_loopback(upstream_port_);
                if (upstream < 0) {
                    close(client);
                } else {
                    int one = 1;
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    pairs_.push_back({client, upstream, false});
                    accepted_.fetch_add(1);
                    open_.fetch_add(1);
                }
            }
        }
        for (std::size_t i = 0; i < polled; ++i) {
            auto& p = pairs_[i];
            for (int side = 0; side < 2 && p.client >= 0; ++side) {
                const auto& f = fds[2 + 2 * i + static_cast<std::size_t>(side)];
                if ((f.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
                const int from = side == 0 ? p.client : p.upstream;
                const int to = side == 0 ? p.upstream : p.client;
                const ssize_t n = read(from, buf, sizeof buf);
                if (n <= 0) {
                    close_pair(p);
                    break;
                }
                if (side == 0) upstream_bytes_.fetch_add(static_cast<std::uint64_t>(n));
                if (corrupt_[side].exchange(false)) {
                    buf[n / 2] = static_cast<char>(buf[n / 2] ^ 0x10);
                    p.tampered = true;
                    {
                        std::lock_guard lock(mutex_);
                        corrupted_at_ = std::chrono::steady_clock::now();
                    }
                    corrupted_done_.store(true);
                }
                ssize_t off = 0;
                while (off < n) {
                    const ssize_t w =
                        send(to, buf + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
                    if (w <= 0) break;
                    off += w;
                }
                if (off < n) {
                    close_pair(p);
                    break;
                }
            }
        }
        std::erase_if(pairs_, [](const Pair& p) { return p.client < 0; });
    }
}

}  // namespace brigade::test
