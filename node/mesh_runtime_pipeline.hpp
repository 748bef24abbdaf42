#pragma once
// The real compute side of the mesh runtime: loads this node's layer ranges, builds the
// PipelineHead (this node is the head) or StageWorker (another stage) of each committed plan,
// routes pipeline frames to them, and is the PipelineDirectory the MeshCompletionService routes
// requests by.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "node/mesh_completion_service.hpp"
#include "node/mesh_runtime.hpp"
#include "node/model_loading.hpp"
#include "node/pipeline_head.hpp"
#include "node/remote_requests.hpp"
#include "node/stage_worker.hpp"

namespace brigade::node {

struct ModelPipelineHostOptions {
    StageLoadOptions load;
    PipelineHeadOptions head;
};

// This node's decode speed for the capacity report: loads layer 0 only, runs a short prompt,
// then the median of `n_steps` timed one-token decode steps of that layer (embedding included).
model::Result<double> measure_layer_seconds(const ModelFrontend& model,
                                            const StageLoadOptions& options, spdlog::logger& logger,
                                            int n_steps = 8);

class ModelPipelineHost final : public PipelineHost, public PipelineDirectory {
public:
    // `model` and `sender` must outlive this object.
    ModelPipelineHost(const ModelFrontend& model, mesh::NodeId self, FrameSender& sender,
                      ModelPipelineHostOptions options, std::shared_ptr<spdlog::logger> logger);
    ~ModelPipelineHost() override;

    // The service told about pipeline changes and fed the origin-side frames. Set before the
    // runtime starts; cleared (nullptr) before the service is destroyed.
    void set_service(MeshCompletionService* service);

    // PipelineHost (see mesh_runtime.hpp for the threads).
    std::optional<std::string> load_stage(std::uint64_t epoch, model::LayerRange range) override;
    void drop_stage(std::uint64_t epoch) override;
    void activate(PipelineRoute route) override;
    void deactivate(std::string why, bool plan_expected) override;
    void on_pipeline_frame(const mesh::NodeId& from, mesh::Message message) override;
    void on_member_gone(const mesh::NodeId& id) override;
    void on_link_down(const mesh::NodeId& peer) override;
    void on_link_up(const mesh::NodeId& peer) override;
    mesh::StageStats stage_stats() override;
    void on_tick() override;
    void on_link_rtts(LinkRtts rtts) override;

    // PipelineDirectory (any thread).
    std::optional<ActivePipeline> active(std::string& why) override;
    bool plan_expected() override;

    // Shutdown: the head finishes running requests for up to `drain`, then everything stops;
    // requests get 503 "shutting down" from then on. Idempotent.
    void stop(std::chrono::milliseconds drain);

private:
    struct Part {  // this node's share of the active plan
        std::shared_ptr<PipelineHead> head;
        std::shared_ptr<StageWorker> worker;
    };
    void swap_in(std::optional<PipelineRoute> route, Part part, std::string why);
    void dispatch(const mesh::NodeId& from, mesh::Message message);
    // Frames of a newer plan than the one running here, held until it activates (its commit can
    // arrive after the first frames routed by it: they travel on other links).
    struct Held {
        mesh::NodeId from;
        mesh::Message message;
        std::uint64_t epoch = 0;
        std::chrono::steady_clock::time_point since;
    };
    std::vector<Held> take_held(std::uint64_t up_to_epoch, bool expired_only);
    void join_stoppers();

    const ModelFrontend& model_;
    mesh::NodeId self_;
    FrameSender& sender_;
    ModelPipelineHostOptions options_;
    std::shared_ptr<spdlog::logger> logger_;

    std::mutex loaded_mutex_;
    std::map<std::uint64_t, std::shared_ptr<StageResources>> loaded_;  // by epoch

    mutable std::mutex mutex_;
    std::vector<Held> held_;
    std::optional<PipelineRoute> route_;
    LinkRtts link_rtts_;
    Part part_;
    std::string why_ = "no plan yet";
    bool plan_expected_ = true;  // until the runtime says otherwise, a first plan is coming
    bool stopped_ = false;
    MeshCompletionService* service_ = nullptr;

    struct Stopper {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done;
    };
    std::mutex stoppers_mutex_;
    std::vector<Stopper> stoppers_;  // stopping replaced parts; joined by stop()
};

}  // namespace brigade::node
