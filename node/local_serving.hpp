#pragma once
// A complete single-node `api::CompletionService`: a one-stage route on this node (head ==
// tail == origin), a PipelineHead that samples locally, and a MeshCompletionService over a
// directory that always answers with that route. `brigade serve` without a mesh, and the unit
// tests' reference for what a pipeline must reproduce.

#include <spdlog/logger.h>

#include <chrono>
#include <memory>

#include "node/mesh_completion_service.hpp"
#include "node/pipeline_head.hpp"
#include "node/pipeline_types.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct LocalServingOptions {
    PipelineHeadOptions head;
    SamplingDefaults sampling;
    MeshServiceOptions service;
};

class LocalServing {
public:
    // `resources` must hold every layer of `model`; `model` must outlive this object.
    LocalServing(const ModelFrontend& model, std::shared_ptr<StageResources> resources,
                 mesh::NodeId self, LocalServingOptions options,
                 std::shared_ptr<spdlog::logger> logger);
    ~LocalServing();
    LocalServing(const LocalServing&) = delete;
    LocalServing& operator=(const LocalServing&) = delete;

    api::CompletionService& service();
    PipelineHead& head();

    // Ends generation: requests still queued or running get `unavailable` after `drain`
    // (running ones may finish within it). Idempotent.
    void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace brigade::node
