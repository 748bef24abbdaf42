#pragma once
// `api::CompletionService` at the pipeline head: this node holds the whole model and computes
// requests itself through a `BatchScheduler`. (With the mesh, a node that is not the head will
// implement the same interface as a router forwarding to the head; the HTTP layer cannot tell.)

#include <spdlog/logger.h>

#include <memory>
#include <vector>

#include "api/completion_service.hpp"
#include "node/scheduler.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

class HeadCompletionService final : public api::CompletionService {
public:
    HeadCompletionService(ServeModel& model, SchedulerOptions options,
                          std::shared_ptr<spdlog::logger> logger);

    // Called on an I/O thread: resolves the model name and queues; never computes.
    void start(api::CompletionRequest request, std::shared_ptr<api::CompletionSink> sink,
               std::shared_ptr<api::Cancellation> cancel) override;
    std::vector<api::ModelInfo> list_models() override { return models_; }
    api::Health health() override;

    // Ends generation: queued and running requests get `unavailable`.
    void stop() { scheduler_.stop(); }

private:
    std::vector<api::ModelInfo> models_;
    BatchScheduler scheduler_;
};

}  // namespace brigade::node
