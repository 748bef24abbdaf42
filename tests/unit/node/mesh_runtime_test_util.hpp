#pragma once
// In-process mesh runtimes over loopback TCP with a fake compute side: what the runtime asks of
// the PipelineHost is recorded, and waits poll with a deadline.

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mesh/tcp_transport.hpp"
#include "node/logging.hpp"
#include "node/mesh_runtime.hpp"

namespace brigade::node::test {

using namespace std::chrono_literals;

class FakeHost final : public PipelineHost {
public:
    std::optional<std::string> load_stage(std::uint64_t epoch, model::LayerRange range) override {
        loads_started.fetch_add(1);
        // A load takes a while; the I/O thread goes on.
        std::this_thread::sleep_for(std::chrono::milliseconds(load_ms.load()));
        std::lock_guard lock(mutex_);
        loads_.push_back({epoch, range});
        if (fail_loads) return std::string("disk on fire");
        return std::nullopt;
    }
    void drop_stage(std::uint64_t epoch) override {
        std::lock_guard lock(mutex_);
        drops_.push_back(epoch);
    }
    void activate(PipelineRoute route) override {
        std::lock_guard lock(mutex_);
        routes_.push_back(std::move(route));
        why_.clear();
        active_ = true;
    }
    void deactivate(std::string why, bool plan_expected) override {
        std::lock_guard lock(mutex_);
        why_ = std::move(why);
        plan_expected_ = plan_expected;
        active_ = false;
    }
    void on_pipeline_frame(const mesh::NodeId& from, mesh::Message message) override {
        std::lock_guard lock(mutex_);
        frames_.push_back({from, std::move(message)});
    }
    void on_member_gone(const mesh::NodeId& id) override {
        std::lock_guard lock(mutex_);
        gone_.push_back(id);
    }
    mesh::StageStats stage_stats() override {
        std::lock_guard lock(mutex_);
        if (!active_ || routes_.empty()) return {};
        return {routes_.back().epoch, 7, 11, 1500};
    }

    std::optional<PipelineRoute> route() {
        std::lock_guard lock(mutex_);
        if (!active_ || routes_.empty()) return std::nullopt;
        return routes_.back();
    }
    std::string why() {
        std::lock_guard lock(mutex_);
        return why_;
    }
    // What the last deactivate said: whether requests may wait for a plan.
    bool plan_expected() {
        std::lock_guard lock(mutex_);
        return plan_expected_;
    }
    std::size_t n_loads() {
        std::lock_guard lock(mutex_);
        return loads_.size();
    }
    std::vector<std::pair<mesh::NodeId, mesh::Message>> frames() {
        std::lock_guard lock(mutex_);
        return frames_;
    }
    std::vector<mesh::NodeId> gone() {
        std::lock_guard lock(mutex_);
        return gone_;
    }

    std::atomic<bool> fail_loads{false};
    std::atomic<int> load_ms{20};
    std::atomic<int> loads_started{0};

private:
    struct Load {
        std::uint64_t epoch;
        model::LayerRange range;
    };
    std::mutex mutex_;
    std::vector<Load> loads_;
    std::vector<std::uint64_t> drops_;
    std::vector<PipelineRoute> routes_;
    std::vector<std::pair<mesh::NodeId, mesh::Message>> frames_;
    std::vector<mesh::NodeId> gone_;
    std::string why_;
    bool plan_expected_ = true;
    bool active_ = false;
};

// A 4-layer model of 1 MB per layer, 0.5 MB embedding and 0.5 MB lm_head: ~5 MB in all.
inline model::ModelShape fake_shape() {
    model::ModelShape s;
    s.n_layers = 4;
    s.hidden_size = 64;
    s.vocab_size = 1000;
    s.layer_bytes.assign(4, 1'000'000);
    s.embedding_bytes = 500'000;
    s.lm_head_bytes = 500'000;
    s.kv_bytes_per_token_per_layer = 512;
    return s;
}

inline MeshRuntimeOptions fast_options(std::uint64_t memory_bytes) {
    MeshRuntimeOptions o;
    o.listen_host = "127.0.0.1";
    o.listen_port = 0;
    o.discovery = false;
    o.membership.suspect_after = 600ms;
    o.membership.dead_after = 1500ms;
    o.keepalive_interval = 150ms;
    o.capacity_interval = 300ms;
    o.tick_interval = 20ms;
    o.plan_debounce = 150ms;
    o.plan_retry = 300ms;
    o.redial_min = 50ms;
    o.redial_max = 400ms;
    o.memory_bytes = memory_bytes;
    o.seconds_per_layer = 0.001;
    o.model_id = "fake-model";
    o.shape = fake_shape();
    o.context_tokens = 16;
    return o;
}

struct TestNode {
    TestNode(const mesh::MeshCredentials& mesh, MeshRuntimeOptions options,
             mesh::NodeKey key = mesh::NodeKey::generate())
        : runtime(std::move(key), mesh, std::move(options),
                  make_stderr_logger("mesh-test", std::getenv("BRIGADE_TEST_MESH_DEBUG") != nullptr
                                                      ? spdlog::level::debug
                                                      : spdlog::level::warn)) {}
    mesh::PeerAddress address() const { return {"127.0.0.1", runtime.port()}; }
    FakeHost host;
    MeshRuntime runtime;
};

// `n` new node keys, lowest id first (the first is the coordinator of a mesh of them).
inline std::vector<mesh::NodeKey> keys_by_id(int n) {
    std::vector<mesh::NodeKey> keys;
    for (int i = 0; i < n; ++i) keys.push_back(mesh::NodeKey::generate());
    std::sort(keys.begin(), keys.end(),
              [](const auto& x, const auto& y) { return x.id() < y.id(); });
    return keys;
}

inline bool wait_until(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition()) return true;
        std::this_thread::sleep_for(10ms);
    }
    return condition();
}

// Runs `body` on a fresh io_context with a time limit: the test's own hand-driven links.
inline void run_coroutine(
    std::function<boost::asio::awaitable<void>(boost::asio::io_context&)> body,
    std::chrono::milliseconds limit = 20s) {
    boost::asio::io_context io;
    bool done = false;
    std::exception_ptr error;
    boost::asio::co_spawn(io, body(io), [&](std::exception_ptr e) {
        done = true;
        error = e;
    });
    io.run_for(limit);
    ASSERT_TRUE(done) << "did not finish within " << limit.count() << " ms";
    if (error) std::rethrow_exception(error);
}

inline boost::asio::awaitable<void> pause(boost::asio::io_context& io,
                                          std::chrono::milliseconds d) {
    boost::asio::steady_timer t(io, d);
    co_await t.async_wait(boost::asio::use_awaitable);
}

// A hand-driven link to `to` as node `as` (`listen_port` in its Hello), or null after a test
// failure.
inline boost::asio::awaitable<std::shared_ptr<mesh::Link>> hand_link(
    const TestNode& to, const mesh::NodeKey& as, const mesh::MeshCredentials& mesh,
    std::uint16_t listen_port, std::chrono::milliseconds keepalive = 100ms) {
    mesh::LinkConfig config;
    config.keepalive_interval = keepalive;
    config.listen_port = listen_port;
    const mesh::PeerAddress where = to.address();
    auto link = co_await mesh::async_connect_link(where, as, mesh, config);
    if (!link) {
        ADD_FAILURE() << link.error().what();
        co_return nullptr;
    }
    co_return *link;
}

// What a hand-driven peer reports: 1 MB for the fake model.
inline mesh::Message small_capacity_of(const mesh::NodeKey& peer) {
    return mesh::CapacityReport{peer.id(), 1'000'000, "cpu", "fake-model", 0.001, {}, {}};
}

// A loopback port nothing listens on: bound, then closed.
inline std::uint16_t closed_port() {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    return acceptor.local_endpoint().port();
}

}  // namespace brigade::node::test
