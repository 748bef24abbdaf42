#include "node/mesh_runtime_pipeline.hpp"

#include <algorithm>

namespace brigade::node {

model::Result<double> measure_layer_seconds(const ModelFrontend& model,
                                            const StageLoadOptions& options, spdlog::logger& logger,
                                            int n_steps) {
    StageLoadOptions one = options;
    one.show_progress = false;
    auto loaded = load_stage_resources(model, {0, 1}, one, logger);
    if (!loaded) return loaded.error();
    model::Stage& stage = *(*loaded)->stage;
    model::SequenceBatchEntry prompt;
    prompt.seq_id = 1;
    prompt.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    prompt.n_tokens = 8;
    if (auto warm = stage.run_layers({prompt}); !warm) return warm.error();
    // Warm-up steps first (page faults, caches), then the median of timed steps: a start-up
    // measurement on a busy machine must not be thrown off by one slow step.
    std::int32_t pos = prompt.n_tokens;
    std::vector<double> steps;
    for (int i = 0; i < n_steps + 3; ++i) {
        model::SequenceBatchEntry step;
        step.seq_id = 1;
        step.tokens = {static_cast<std::int32_t>(9 + i)};
        step.pos0 = pos++;
        step.n_tokens = 1;
        const auto t0 = std::chrono::steady_clock::now();
        if (auto out = stage.run_layers({step}); !out) return out.error();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - t0;
        if (i >= 3) steps.push_back(elapsed.count());
    }
    std::sort(steps.begin(), steps.end());
    const double median = steps[steps.size() / 2];
    stage.kv_cache().release(1);
    return median;
}

ModelPipelineHost::ModelPipelineHost(const ModelFrontend& model, mesh::NodeId self,
                                     FrameSender& sender, ModelPipelineHostOptions options,
                                     std::shared_ptr<spdlog::logger> logger)
    : model_(model),
      self_(self),
      sender_(sender),
      options_(std::move(options)),
      logger_(std::move(logger)) {}

ModelPipelineHost::~ModelPipelineHost() {
    stop(std::chrono::milliseconds(0));
    join_stoppers();
}

void ModelPipelineHost::set_service(MeshCompletionService* service) {
    std::lock_guard lock(mutex_);
    service_ = service;
}

std::optional<std::string> ModelPipelineHost::load_stage(std::uint64_t epoch,
                                                         model::LayerRange range) {
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return std::string("shutting down");
    }
    auto loaded = load_stage_resources(model_, range, options_.load, *logger_);
    if (!loaded) return loaded.error().message;
    std::lock_guard lock(loaded_mutex_);
    loaded_[epoch] = std::move(*loaded);
    return std::nullopt;
}

void ModelPipelineHost::drop_stage(std::uint64_t epoch) {
    std::shared_ptr<StageResources> dropped;
    std::lock_guard lock(loaded_mutex_);
    if (auto it = loaded_.find(epoch); it != loaded_.end()) {
        dropped = std::move(it->second);
        loaded_.erase(it);
    }
}

void ModelPipelineHost::swap_in(std::optional<PipelineRoute> route, Part part, std::string why) {
    Part old;
    MeshCompletionService* service = nullptr;
    {
        std::lock_guard lock(mutex_);
        if (stopped_) {
            route.reset();
            why = "shutting down";
            if (part.head) old.head = std::move(part.head);
            if (part.worker) old.worker = std::move(part.worker);
        } else {
            old = std::move(part_);
            part_ = std::move(part);
            route_ = std::move(route);
            why_ = std::move(why);
        }
        service = service_;
    }
    if (service != nullptr) service->on_pipeline_changed();
    // The old part stops on a thread of its own: stopping waits for its current step, which
    // must not hold up the mesh I/O thread (keepalives) for a large model.
    if (old.head || old.worker) {
        std::lock_guard lock(stoppers_mutex_);
        // Join the ones that are done, so that many re-plans do not pile up threads.
        for (auto it = stoppers_.begin(); it != stoppers_.end();) {
            if (it->done->load()) {
                it->thread.join();
                it = stoppers_.erase(it);
            } else {
                ++it;
            }
        }
        auto done = std::make_shared<std::atomic<bool>>(false);
        std::thread thread([old = std::move(old), done] {
            if (old.head) old.head->stop(std::chrono::milliseconds(0));
            if (old.worker) old.worker->stop();
            done->store(true);
        });
        stoppers_.push_back({std::move(thread), std::move(done)});
    }
}

void ModelPipelineHost::join_stoppers() {
    std::vector<Stopper> stoppers;
    {
        std::lock_guard lock(stoppers_mutex_);
        stoppers.swap(stoppers_);
    }
    for (Stopper& s : stoppers) s.thread.join();
}

void ModelPipelineHost::activate(PipelineRoute route) {
    const int index = route.index_of(self_);
    Part part;
    if (index >= 0) {
        std::shared_ptr<StageResources> resources;
        {
            std::lock_guard lock(loaded_mutex_);
            auto it = loaded_.find(route.epoch);
            if (it != loaded_.end()) {
                resources = std::move(it->second);
                loaded_.erase(it);
            }
            loaded_.clear();  // ranges of older proposals are of no use now
        }
        if (!resources) {
            logger_->error("plan {}: no loaded stage for this node; it cannot serve", route.epoch);
            swap_in(std::nullopt, {},
                    "this node's stage of plan " + std::to_string(route.epoch) + " is not loaded");
            return;
        }
        if (index == 0) {
            part.head = std::make_shared<PipelineHead>(model_, std::move(resources), route,
                                                       &sender_, options_.head, logger_);
        } else {
            part.worker = std::make_shared<StageWorker>(model_, std::move(resources), route,
                                                        sender_, logger_);
        }
    }
    const std::uint64_t epoch = route.epoch;
    swap_in(std::move(route), std::move(part), "");
    for (Held& h : take_held(epoch, false)) dispatch(h.from, std::move(h.message));
}

void ModelPipelineHost::deactivate(std::string why, bool plan_expected) {
    {
        std::lock_guard lock(mutex_);
        plan_expected_ = plan_expected;
    }
    swap_in(std::nullopt, {}, std::move(why));
}

namespace {

// How long a frame of a plan that is not active here yet waits for its commit.
constexpr auto kHoldLimit = std::chrono::seconds(3);
constexpr std::size_t kMaxHeld = 4096;

std::uint64_t routed_epoch(const mesh::Message& m) {
    if (const auto* r = std::get_if<mesh::RequestFrame>(&m)) return r->epoch;
    if (const auto* a = std::get_if<mesh::ActivationFrame>(&m)) return a->epoch;
    if (const auto* k = std::get_if<mesh::KvPrefix>(&m)) return k->epoch;  // with activations
    return 0;
}

}  // namespace

void ModelPipelineHost::on_pipeline_frame(const mesh::NodeId& from, mesh::Message message) {
    const std::uint64_t epoch = routed_epoch(message);
    if (epoch != 0) {
        std::lock_guard lock(mutex_);
        const std::uint64_t here = route_ ? route_->epoch : 0;
        if (epoch > here && !stopped_ && held_.size() < kMaxHeld) {
            held_.push_back({from, std::move(message), epoch, std::chrono::steady_clock::now()});
            return;
        }
    }
    dispatch(from, std::move(message));
}

std::vector<ModelPipelineHost::Held> ModelPipelineHost::take_held(std::uint64_t up_to_epoch,
                                                                  bool expired_only) {
    std::vector<Held> out;
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = held_.begin(); it != held_.end();) {
        if (it->epoch <= up_to_epoch || (expired_only && now - it->since >= kHoldLimit) ||
            stopped_) {
            out.push_back(std::move(*it));
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    return out;
}

void ModelPipelineHost::on_tick() {
    // Frames whose plan never came here are handled as what they are now: routed by a plan this
    // node does not run (the request gets a 503 its origin can act on; activations are dropped).
    for (Held& h : take_held(0, true)) dispatch(h.from, std::move(h.message));
}

void ModelPipelineHost::dispatch(const mesh::NodeId& from, mesh::Message message) {
    Part part;
    MeshCompletionService* service = nullptr;
    {
        std::lock_guard lock(mutex_);
        part = part_;
        service = service_;
    }
    if (auto* token = std::get_if<mesh::TokenFrame>(&message)) {
        if (part.head) {
            part.head->on_token_frame(std::move(*token));
        } else {
            logger_->debug("token frame from {} but this node is no head", from.short_string());
        }
    } else if (auto* activation = std::get_if<mesh::ActivationFrame>(&message)) {
        if (part.worker) {
            part.worker->on_activation(std::move(*activation));
        } else {
            logger_->debug("activation frame (epoch {}) from {} but this node runs no stage",
                           activation->epoch, from.short_string());
        }
    } else if (auto* prefix = std::get_if<mesh::KvPrefix>(&message)) {
        if (part.worker) part.worker->on_kv_prefix(std::move(*prefix));
    } else if (auto* cancel = std::get_if<mesh::Cancel>(&message)) {
        if (part.head) part.head->cancel(cancel->request_id);
        if (part.worker) part.worker->release(cancel->request_id);
    } else if (auto* update = std::get_if<mesh::RequestUpdate>(&message)) {
        if (service != nullptr) service->on_request_update(from, std::move(*update));
    } else if (auto* error = std::get_if<mesh::ErrorFrame>(&message)) {
        if (part.head && part.head->on_stage_error(from, *error)) return;
        if (service != nullptr) service->on_request_error(from, *error);
    } else if (auto* request = std::get_if<mesh::RequestFrame>(&message)) {
        // Answers 503 itself when this node is not the head of `request->epoch`.
        accept_remote_request(from, std::move(*request), part.head.get(), sender_, *logger_);
    }
}

void ModelPipelineHost::on_member_gone(const mesh::NodeId& id) {
    // Requests whose origin is gone have nobody to stream to: free their slots at our head.
    std::shared_ptr<PipelineHead> head;
    MeshCompletionService* service = nullptr;
    {
        std::lock_guard lock(mutex_);
        head = part_.head;
        service = service_;
    }
    if (head) head->cancel_origin(id);
    // Its link went with it: if it comes back (a member declared dead too early), what it had
    // sent on the old link may be lost.
    if (service != nullptr) service->on_link_down(id);
}

void ModelPipelineHost::on_link_down(const mesh::NodeId& peer) {
    // The origin side only. A head needs nothing: a lost RequestFrame or Cancel of a request
    // that entered at `peer` is made good by that origin's resume (a new attempt, the old one
    // cancelled); the stages' own frames are the coordinator's (a new plan, see peer_relinked).
    MeshCompletionService* service = nullptr;
    {
        std::lock_guard lock(mutex_);
        service = service_;
    }
    if (service != nullptr) service->on_link_down(peer);
}

void ModelPipelineHost::on_link_up(const mesh::NodeId& peer) {
    MeshCompletionService* service = nullptr;
    {
        std::lock_guard lock(mutex_);
        service = service_;
    }
    if (service != nullptr) service->on_link_up(peer);
}

mesh::StageStats ModelPipelineHost::stage_stats() {
    Part part;
    std::uint64_t epoch = 0;
    {
        std::lock_guard lock(mutex_);
        part = part_;
        if (route_) epoch = route_->epoch;
    }
    StageTimings t;
    if (part.head) {
        t = part.head->timings();
    } else if (part.worker) {
        t = part.worker->timings();
    } else {
        return {};
    }
    return {epoch, t.steps, t.tokens, static_cast<std::uint32_t>(t.mean_step_us)};
}

std::optional<ActivePipeline> ModelPipelineHost::active(std::string& why) {
    std::lock_guard lock(mutex_);
    if (!route_) {
        why = why_.empty() ? "no plan yet" : why_;
        return std::nullopt;
    }
    return ActivePipeline{*route_, part_.head, pipeline_hops(*route_, self_, link_rtts_)};
}

void ModelPipelineHost::on_link_rtts(LinkRtts rtts) {
    std::lock_guard lock(mutex_);
    link_rtts_ = std::move(rtts);
}

bool ModelPipelineHost::plan_expected() {
    std::lock_guard lock(mutex_);
    return !route_ && !stopped_ && plan_expected_;
}

void ModelPipelineHost::stop(std::chrono::milliseconds drain) {
    Part part;
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return;
        part = part_;
    }
    // Running requests finish first (bounded by `drain`); the head refuses new ones meanwhile.
    if (part.head) part.head->stop(drain);
    {
        std::lock_guard lock(mutex_);
        stopped_ = true;
        part = std::move(part_);
        part_ = {};
        route_.reset();
        why_ = "shutting down";
    }
    if (part.head) part.head->stop(std::chrono::milliseconds(0));
    if (part.worker) part.worker->stop();
    join_stoppers();
    std::lock_guard lock(loaded_mutex_);
    loaded_.clear();
}

}  // namespace brigade::node
