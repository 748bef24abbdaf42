// MeshRuntime: construction, start/stop, the I/O and loader threads, the periodic tick.

#include "node/mesh_runtime.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <future>

#include "node/mesh_runtime_impl.hpp"

namespace brigade::node {
namespace asio = boost::asio;

// ---- LoaderThread ---------------------------------------------------------------------------

void LoaderThread::start() {
    thread_ = std::thread([this] {
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock lock(mutex_);
                cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
                if (stopping_) return;
                job = std::move(jobs_.front());
                jobs_.pop_front();
            }
            job();
        }
    });
}

void LoaderThread::post(std::function<void()> job) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
}

void LoaderThread::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        jobs_.clear();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

// ---- Addresses ------------------------------------------------------------------------------

std::vector<std::string> interface_addresses() {
    std::vector<std::string> out;
    std::vector<std::string> loopback;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return {"127.0.0.1"};
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
        if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
        boost::system::error_code ec;
        std::string text;
        if (a->ifa_addr->sa_family == AF_INET) {
            const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
            asio::ip::address_v4::bytes_type b;
            std::memcpy(b.data(), &in->sin_addr, 4);
            text = asio::ip::address_v4(b).to_string();
        } else if (a->ifa_addr->sa_family == AF_INET6) {
            const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
            asio::ip::address_v6::bytes_type b;
            std::memcpy(b.data(), &in6->sin6_addr, 16);
            const asio::ip::address_v6 v6(b, in6->sin6_scope_id);
            if (v6.is_link_local()) continue;  // needs a scope id peers cannot use
            text = v6.to_string();
        } else {
            continue;
        }
        auto& into = (a->ifa_flags & IFF_LOOPBACK) != 0 ? loopback : out;
        if (std::find(into.begin(), into.end(), text) == into.end()) into.push_back(text);
    }
    freeifaddrs(list);
    out.insert(out.end(), loopback.begin(), loopback.end());
    if (out.empty()) out.push_back("127.0.0.1");
    return out;
}

// ---- Impl -----------------------------------------------------------------------------------

MeshRuntime::Impl::Impl(mesh::NodeKey k, mesh::MeshCredentials c, MeshRuntimeOptions o,
                        std::shared_ptr<spdlog::logger> l)
    : key(std::move(k)),
      credentials(c),
      options(std::move(o)),
      logger(std::move(l)),
      directory(key.id(), mesh::DiscoveryConfig{options.beacon_interval, std::chrono::seconds(60),
                                                std::max<std::chrono::milliseconds>(
                                                    std::chrono::seconds(10),
                                                    options.membership.dead_after * 2)}),
      membership(key.id(), options.membership),
      agreement(key.id(), mesh::AgreementConfig{options.ack_timeout}) {}

void MeshRuntime::Impl::log(mesh::LogLevel level, std::string_view line) const {
    switch (level) {
        case mesh::LogLevel::kDebug:
            logger->debug("{}", line);
            return;
        case mesh::LogLevel::kInfo:
            logger->info("{}", line);
            return;
        case mesh::LogLevel::kWarn:
            logger->warn("{}", line);
            return;
        case mesh::LogLevel::kError:
            logger->error("{}", line);
            return;
    }
}

std::chrono::milliseconds MeshRuntime::Impl::link_idle_timeout() const {
    // A silent link is closed once its peer would be suspect (membership counts the silence
    // from the last bytes: see refresh_membership), but not before 3 keepalives were missed.
    return std::max(options.membership.suspect_after, 3 * options.keepalive_interval);
}

mesh::LinkConfig MeshRuntime::Impl::link_config() const {
    mesh::LinkConfig c;
    c.connect_timeout = options.connect_timeout;
    c.handshake_timeout = options.handshake_timeout;
    c.keepalive_interval = options.keepalive_interval;
    c.idle_timeout = link_idle_timeout();
    c.listen_port = bound_port.load();
    c.incarnation = incarnation;
    c.capabilities |= mesh::kCapApi;
    c.log = [weak = weak_from_this()](mesh::LogLevel level, std::string_view line) {
        if (auto self = weak.lock()) self->log(level, line);
    };
    return c;
}

mesh::Result<void> MeshRuntime::Impl::open() {
    auto l = mesh::TcpListener::open(io.get_executor(), options.listen_host, options.listen_port);
    if (!l && options.fallback_to_any_port && options.listen_port != 0) {
        logger->warn("mesh port {} is busy ({}); listening on any free port instead",
                     options.listen_port, l.error().message);
        l = mesh::TcpListener::open(io.get_executor(), options.listen_host, 0);
    }
    if (!l) return l.error();
    listener = std::move(*l);
    bound_port = listener->port();

    std::vector<mesh::PeerAddress> self;
    boost::system::error_code ec;
    const auto host = asio::ip::make_address(options.listen_host, ec);
    if (!ec && host.is_unspecified()) {
        for (const std::string& a : interface_addresses()) {
            const auto parsed = asio::ip::make_address(a, ec);
            if (ec || (host.is_v4() && !parsed.is_v4())) continue;
            self.push_back({a, bound_port.load()});
        }
    } else {
        self.push_back({options.listen_host, bound_port.load()});
    }
    if (self.size() > mesh::kMaxTokenAddresses) self.resize(mesh::kMaxTokenAddresses);
    {
        std::lock_guard lock(addresses_mutex);
        addresses = self;
    }

    if (options.discovery) {
        mesh::MulticastBeacon::Config bc;
        bc.group = options.discovery_group;
        bc.port = options.discovery_port;
        bc.interval = options.beacon_interval;
        bc.log = [weak = weak_from_this()](mesh::LogLevel level, std::string_view line) {
            if (auto s = weak.lock()) s->log(level, line);
        };
        auto b = mesh::MulticastBeacon::open(io.get_executor(), bc, credentials.secret, key.id(),
                                             bound_port.load());
        if (b) {
            beacon = std::move(*b);
        } else {
            // No multicast (no route, a container without it): seeds and gossip still work.
            logger->warn("LAN discovery is off: {}", b.error().message);
        }
    }
    return {};
}

void MeshRuntime::Impl::mark_settled() {
    if (is_settled.exchange(true)) return;
    std::function<void()> callback;
    {
        std::lock_guard lock(settled_mutex);
        callback = std::move(on_settled);
    }
    if (callback) callback();
}

// Coroutines of the runtime hold `this` only: the I/O thread is joined before Impl goes, and the
// io_context (declared before the state) destroys their frames without resuming them.
asio::awaitable<void> MeshRuntime::Impl::tick_loop() {
    while (!stopping) {
        ticker.expires_after(options.tick_interval);
        co_await ticker.async_wait(asio::as_tuple(asio::use_awaitable));
        if (stopping) co_return;
        run_tick();
    }
}

void MeshRuntime::Impl::run_tick() {
    const auto now = mesh::Clock::now();
    refresh_membership(now);
    on_discovery(directory.tick(now));
    run_actions(agreement.tick(now));
    dial_due(now);
    if (now - last_capacity_sent >= options.capacity_interval) {
        send_capacity_and_peers(std::nullopt);
        last_capacity_sent = now;
    }
    plan_if_due(now);
    expire_held_outgoing(now);
    if (host != nullptr) {
        host->on_link_rtts(link_rtts());
        host->on_tick();
    }
}

void MeshRuntime::Impl::shutdown_on_io() {
    if (stopping) return;
    stopping = true;
    ticker.cancel();
    if (listener) listener->close();
    if (beacon) beacon->stop();
    for (auto& [id, slot] : links) {
        slot->retired = true;
        // Link::close queues a Bye behind the frames already queued; the peer drops us at once.
        slot->link->close("leaving the mesh");
        slot->wake.cancel();
    }
    links.clear();
}

// ---- RuntimeSender --------------------------------------------------------------------------

void RuntimeSender::send(const mesh::NodeId& to, mesh::Message message) {
    if (!impl_.started || impl_.stopped) return;
    asio::post(impl_.io, [weak = impl_.weak_from_this(), to,
                          m = std::make_shared<mesh::Message>(std::move(message))]() mutable {
        if (auto self = weak.lock()) self->send_now(to, std::move(*m));
    });
}

// ---- MeshRuntime ----------------------------------------------------------------------------

MeshRuntime::MeshRuntime(mesh::NodeKey key, mesh::MeshCredentials credentials,
                         MeshRuntimeOptions options, std::shared_ptr<spdlog::logger> logger)
    : impl_(std::make_shared<Impl>(std::move(key), credentials, std::move(options),
                                   std::move(logger))) {}

MeshRuntime::~MeshRuntime() { stop(); }

FrameSender& MeshRuntime::sender() { return impl_->frame_sender; }
const mesh::NodeId& MeshRuntime::self() const { return impl_->key.id(); }
std::uint16_t MeshRuntime::port() const { return impl_->bound_port.load(); }

std::vector<mesh::PeerAddress> MeshRuntime::self_addresses() const {
    std::lock_guard lock(impl_->addresses_mutex);
    return impl_->addresses;
}

bool MeshRuntime::settled() const { return impl_->is_settled.load(); }

void MeshRuntime::set_on_settled(std::function<void()> on_settled) {
    {
        std::lock_guard lock(impl_->settled_mutex);
        if (!impl_->is_settled) {
            impl_->on_settled = std::move(on_settled);
            return;
        }
    }
    if (on_settled) on_settled();
}

mesh::Result<void> MeshRuntime::start(PipelineHost& host) {
    if (impl_->started) return mesh::make_error(mesh::errc::invalid_argument, "already started");
    impl_->host = &host;
    if (auto opened = impl_->open(); !opened) return opened.error();
    impl_->started_at = mesh::Clock::now();
    impl_->dirty_since = impl_->started_at;
    impl_->membership.set_self_capacity(impl_->self_capacity());
    for (const mesh::PeerAddress& seed : impl_->options.seeds) {
        impl_->on_discovery(impl_->directory.add_seed(seed));
    }
    impl_->set_unavailable("no plan yet: the mesh is forming", /*plan_expected=*/true);
    impl_->started = true;
    impl_->work.emplace(impl_->io.get_executor());
    auto on_done = [weak = impl_->weak_from_this()](std::exception_ptr e) {
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            if (auto self = weak.lock()) self->logger->error("mesh task failed: {}", ex.what());
        }
    };
    asio::co_spawn(impl_->io, impl_->accept_loop(), on_done);
    asio::co_spawn(impl_->io, impl_->tick_loop(), on_done);
    if (impl_->beacon) {
        asio::co_spawn(impl_->io,
                       impl_->beacon->run([weak = impl_->weak_from_this()](
                                              const mesh::Beacon& b, const std::string& from) {
                           if (auto self = weak.lock()) self->on_beacon(b, from);
                       }),
                       on_done);
    }
    impl_->loader.start();
    impl_->io_thread = std::thread([impl = impl_] { impl->io.run(); });
    impl_->logger->info("mesh {}: node {} listening on {}:{}", impl_->credentials.id.to_string(),
                        impl_->key.id().to_string(), impl_->options.listen_host,
                        impl_->bound_port.load());
    return {};
}

nlohmann::json MeshRuntime::status() {
    if (!impl_->started || impl_->stopped) return impl_->status_on_io();
    auto promise = std::make_shared<std::promise<nlohmann::json>>();
    auto future = promise->get_future();
    asio::post(impl_->io, [impl = impl_, promise] { promise->set_value(impl->status_on_io()); });
    if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
        return nlohmann::json{{"error", "the mesh thread did not answer within 2 s"}};
    }
    return future.get();
}

bool MeshRuntime::leave(std::chrono::milliseconds limit) {
    if (!impl_->started || impl_->stopped) return false;
    asio::post(impl_->io, [impl = impl_] {
        if (impl->leaving || impl->stopping) return;
        impl->leaving = true;
        impl->logger->info("leaving the mesh: asking for a plan without this node");
        impl->send_capacity_and_peers(std::nullopt);  // memory 0 now
        impl->last_capacity_sent = mesh::Clock::now();
        impl->mark_plan_dirty("this node is leaving");
    });
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
        auto state = std::make_shared<std::promise<int>>();
        auto future = state->get_future();
        asio::post(impl_->io, [impl = impl_, state] {
            // Not before our own leave request was handled (posts run in order).
            state->set_value(impl->leave_state());
        });
        const auto now = std::chrono::steady_clock::now();
        if (future.wait_until(std::max(deadline, now + std::chrono::milliseconds(100))) !=
            std::future_status::ready) {
            return false;
        }
        const int s = future.get();
        if (s != 0) {
            impl_->logger->info(s > 0 ? "left the plan: the mesh serves without this node"
                                      : "the mesh cannot serve without this node; leaving anyway");
            return s > 0;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            impl_->logger->warn("no plan without this node within {} ms; leaving anyway",
                                limit.count());
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

void MeshRuntime::stop() {
    if (!impl_->started || impl_->stopped.exchange(true)) return;
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    asio::post(impl_->io, [impl = impl_, done] {
        impl->shutdown_on_io();
        done->set_value();
    });
    if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
        impl_->logger->warn("mesh thread did not stop within 2 s; stopping it");
    }
    // The Byes go out within Link's drain bound; give them a moment, then stop the loop.
    impl_->work.reset();
    auto flushed = std::make_shared<std::promise<void>>();
    auto flushed_future = flushed->get_future();
    asio::post(impl_->io, [flushed] { flushed->set_value(); });
    (void)flushed_future.wait_for(std::chrono::milliseconds(300));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    impl_->io.stop();
    if (impl_->io_thread.joinable()) impl_->io_thread.join();
    impl_->loader.stop();
}

}  // namespace brigade::node
