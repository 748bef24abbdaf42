#pragma once
// An in-process mesh for pipeline tests: N nodes, each with its own FrameSender; frames are
// delivered by one thread in send order (so each link is FIFO, as a TCP link is) to the
// receiving node's PipelineHead / StageWorker / MeshCompletionService, dispatched as the mesh
// runtime does. A filter can drop or alter frames in transit (fault injection).

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "node/local_serving.hpp"
#include "node/mesh_completion_service.hpp"
#include "node/pipeline_head.hpp"
#include "node/remote_requests.hpp"
#include "node/stage_worker.hpp"
#include "tests/unit/node/node_test_support.hpp"

namespace brigade::node::testing {

inline mesh::NodeId node_id(int i) {
    mesh::NodeId id;
    id.bytes[0] = static_cast<std::uint8_t>(i + 1);
    id.bytes[19] = 0x5a;
    return id;
}

// Records one request's events (as the HTTP layer would see them).
class RecordingSink final : public api::CompletionSink {
public:
    void on_prompt(const api::PromptInfo& info) override {
        std::lock_guard lock(mutex_);
        prompt = info;
    }
    void on_progress(const api::PrefillProgress&) override {}
    void on_delta(api::Delta d) override {
        std::lock_guard lock(mutex_);
        content += d.content;
        for (auto& lp : d.logprobs) logprobs.push_back(std::move(lp));
        ++n_deltas;
    }
    void on_final(const api::Final& f) override {
        {
            std::lock_guard lock(mutex_);
            final = f;
            done = true;
        }
        cv_.notify_all();
    }
    void on_error(api::ServiceError e) override {
        {
            std::lock_guard lock(mutex_);
            error = std::move(e);
            done = true;
        }
        cv_.notify_all();
    }
    bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [&] { return done; });
    }
    int deltas() {
        std::lock_guard lock(mutex_);
        return n_deltas;
    }
    bool finished() {
        std::lock_guard lock(mutex_);
        return done;
    }

    std::optional<api::PromptInfo> prompt;
    std::string content;
    std::vector<api::TokenLogprob> logprobs;
    int n_deltas = 0;
    std::optional<api::Final> final;
    std::optional<api::ServiceError> error;
    bool done = false;

private:
    std::mutex mutex_;
    std::condition_variable cv_;
};

// Records the head's events for a HeadRequest submitted directly.
class RecordingEvents final : public RequestEvents {
public:
    void on_accepted(std::uint32_t cached) override {
        std::lock_guard lock(mutex_);
        accepted = true;
        cached_tokens = cached;
    }
    void on_tokens(std::vector<mesh::SampledTokenInfo> t) override {
        std::lock_guard lock(mutex_);
        for (auto& x : t) {
            if (x.finish != mesh::TokenFinish::kContinue) done = true;
            tokens.push_back(std::move(x));
        }
        if (done) cv_.notify_all();
    }
    void on_failed(api::ErrorKind k, std::string message) override {
        {
            std::lock_guard lock(mutex_);
            failed = k;
            error = std::move(message);
            done = true;
        }
        cv_.notify_all();
    }
    bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [&] { return done; });
    }
    std::vector<std::int32_t> ids() {
        std::lock_guard lock(mutex_);
        std::vector<std::int32_t> out;
        for (const auto& t : tokens) {
            if (t.token >= 0) out.push_back(t.token);
        }
        return out;
    }

    bool accepted = false;
    std::uint32_t cached_tokens = 0;
    std::vector<mesh::SampledTokenInfo> tokens;
    std::optional<api::ErrorKind> failed;
    std::string error;
    bool done = false;

private:
    std::mutex mutex_;
    std::condition_variable cv_;
};

class TestMesh {
public:
    // The services' options unless a test gives others: no wait for another pipeline (there is
    // only the one).
    static MeshServiceOptions no_resume_grace() {
        MeshServiceOptions o;
        o.resume_grace = std::chrono::milliseconds(0);
        return o;
    }

    // Filter: return false to drop a frame; may modify it.
    using Filter = std::function<bool(const mesh::NodeId& from, const mesh::NodeId& to,
                                      mesh::Message& message)>;

    // Nodes 0 .. ranges.size()-1 run the stages (node 0 the head); `n_origins` more nodes
    // serve the API only. Each stage's backend has `n_threads` threads.
    TestMesh(const ModelFrontend& model, const std::vector<model::LayerRange>& ranges,
             mesh::ActivationDType dtype, PipelineHeadOptions head_options = {}, int n_origins = 0,
             std::uint64_t epoch = 7, int n_threads = 1,
             MeshServiceOptions service_options = no_resume_grace())
        : model_(model) {
        route_.epoch = epoch;
        route_.activations = dtype;
        for (std::size_t i = 0; i < ranges.size(); ++i) {
            route_.stages.push_back(
                {node_id(static_cast<int>(i)), ranges[i].first, ranges[i].last});
        }
        const std::size_t n_nodes = ranges.size() + static_cast<std::size_t>(n_origins);
        for (std::size_t i = 0; i < n_nodes; ++i) {
            auto n = std::make_unique<Node>(*this, node_id(static_cast<int>(i)));
            auto route = route_;
            route.self = n->id;
            if (i < ranges.size()) {
                n->resources = load_range(model, ranges[i], n_threads);
                if (i == 0) {
                    n->head = std::make_shared<PipelineHead>(model, n->resources, route, &n->sender,
                                                             head_options, quiet_logger());
                } else {
                    n->worker = std::make_unique<StageWorker>(model, n->resources, route, n->sender,
                                                              quiet_logger());
                }
            }
            n->directory.pipeline = ActivePipeline{route, n->head};
            SamplingDefaults defaults;
            defaults.temperature = 0;
            n->service = std::make_unique<MeshCompletionService>(
                model, n->id, n->directory, n->sender, defaults, quiet_logger(), service_options);
            nodes_.push_back(std::move(n));
        }
        delivery_ = std::thread([this] { deliver_loop(); });
    }

    ~TestMesh() {
        for (auto& n : nodes_) n->service->stop();
        if (head_ptr()) head_ptr()->stop(std::chrono::milliseconds(0));
        for (auto& n : nodes_) {
            if (n->worker) n->worker->stop();
        }
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_all();
        delivery_.join();
    }

    PipelineHead& head() { return *nodes_[0]->head; }
    PipelineHead* head_ptr() { return nodes_[0]->head.get(); }
    StageWorker& worker(std::size_t i) { return *nodes_[i]->worker; }
    // The KV cache of stage i (set budgets before submitting requests).
    model::KvCache& kv(std::size_t i) { return nodes_[i]->resources->stage->kv_cache(); }
    MeshCompletionService& service(std::size_t i) { return *nodes_[i]->service; }
    std::size_t n_stages() const { return route_.stages.size(); }
    const PipelineRoute& route() const { return route_; }
    void set_filter(Filter f) {
        std::lock_guard lock(mutex_);
        filter_ = std::move(f);
    }
    // KV sequences held on every stage.
    std::size_t total_kv_sequences() {
        std::size_t n = head().n_kv_sequences();
        for (std::size_t i = 1; i < n_stages(); ++i) n += worker(i).n_kv_sequences();
        return n;
    }
    // Every stage holds exactly `n` KV sequences (after all requests ended: the prefix cache's
    // entries, which the other stages mirror).
    bool every_stage_holds(std::size_t n) {
        if (head().n_kv_sequences() != n) return false;
        for (std::size_t i = 1; i < n_stages(); ++i) {
            if (worker(i).n_kv_sequences() != n) return false;
        }
        return true;
    }
    // Polls `done` until it holds or the time is up.
    bool wait_until(const std::function<bool()>& done,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        return wait_for(done, timeout);
    }
    static bool wait_for(const std::function<bool()>& done,
                         std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < end) {
            if (done()) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return done();
    }
    std::size_t frames_sent(mesh::MsgType type) {
        std::lock_guard lock(mutex_);
        return counts_[type];
    }

private:
    struct Node;
    class NodeSender final : public FrameSender {
    public:
        NodeSender(TestMesh& mesh, mesh::NodeId self) : mesh_(mesh), self_(self) {}
        void send(const mesh::NodeId& to, mesh::Message message) override {
            mesh_.enqueue(self_, to, std::move(message));
        }

    private:
        TestMesh& mesh_;
        mesh::NodeId self_;
    };
    class Directory final : public PipelineDirectory {
    public:
        std::optional<ActivePipeline> active(std::string&) override { return pipeline; }
        std::optional<ActivePipeline> pipeline;
    };
    struct Node {
        Node(TestMesh& mesh, mesh::NodeId id) : id(id), sender(mesh, id) {}
        mesh::NodeId id;
        NodeSender sender;
        std::shared_ptr<StageResources> resources;
        std::shared_ptr<PipelineHead> head;
        std::unique_ptr<StageWorker> worker;
        Directory directory;
        std::unique_ptr<MeshCompletionService> service;
    };
    struct InTransit {
        mesh::NodeId from, to;
        mesh::Message message;
    };

    void enqueue(const mesh::NodeId& from, const mesh::NodeId& to, mesh::Message m) {
        {
            std::lock_guard lock(mutex_);
            ++counts_[mesh::message_type(m)];
            queue_.push_back({from, to, std::move(m)});
        }
        cv_.notify_all();
    }

    Node* find(const mesh::NodeId& id) {
        for (auto& n : nodes_) {
            if (n->id == id) return n.get();
        }
        return nullptr;
    }

    void deliver_loop() {
        for (;;) {
            InTransit t;
            Filter filter;
            {
                std::unique_lock lock(mutex_);
                cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
                if (stopping_) return;
                t = std::move(queue_.front());
                queue_.pop_front();
                filter = filter_;
            }
            if (filter && !filter(t.from, t.to, t.message)) continue;
            Node* n = find(t.to);
            if (n == nullptr) continue;
            dispatch(*n, t.from, std::move(t.message));
        }
    }

    void dispatch(Node& n, const mesh::NodeId& from, mesh::Message m) {
        if (auto* a = std::get_if<mesh::ActivationFrame>(&m)) {
            if (n.worker) n.worker->on_activation(std::move(*a));
        } else if (auto* tok = std::get_if<mesh::TokenFrame>(&m)) {
            if (n.head) n.head->on_token_frame(std::move(*tok));
        } else if (auto* k = std::get_if<mesh::KvPrefix>(&m)) {
            if (n.worker) n.worker->on_kv_prefix(std::move(*k));
        } else if (auto* c = std::get_if<mesh::Cancel>(&m)) {
            if (n.head) n.head->cancel(c->request_id);
            if (n.worker) n.worker->release(c->request_id);
        } else if (auto* e = std::get_if<mesh::ErrorFrame>(&m)) {
            if (n.head && n.head->on_stage_error(from, *e)) return;
            n.service->on_request_error(from, *e);
        } else if (auto* r = std::get_if<mesh::RequestFrame>(&m)) {
            accept_remote_request(from, std::move(*r), n.head.get(), n.sender, *quiet_logger());
        } else if (auto* u = std::get_if<mesh::RequestUpdate>(&m)) {
            n.service->on_request_update(from, std::move(*u));
        }
    }

    const ModelFrontend& model_;
    PipelineRoute route_;
    std::vector<std::unique_ptr<Node>> nodes_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<InTransit> queue_;
    std::map<mesh::MsgType, std::size_t> counts_;
    Filter filter_;
    bool stopping_ = false;
    std::thread delivery_;
};

// A completions request for `prompt` (greedy unless the test changes it).
inline api::CompletionRequest completion(const std::string& prompt, std::int64_t max_tokens,
                                         const std::string& id = "cmpl-test") {
    api::CompletionRequest r;
    r.id = id;
    r.endpoint = api::Endpoint::completions;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0;
    return r;
}

struct Started {
    std::shared_ptr<RecordingSink> sink = std::make_shared<RecordingSink>();
    std::shared_ptr<api::Cancellation> cancel = std::make_shared<api::Cancellation>();
};

inline Started start(api::CompletionService& service, api::CompletionRequest request) {
    Started s;
    service.start(std::move(request), s.sink, s.cancel);
    return s;
}

}  // namespace brigade::node::testing
