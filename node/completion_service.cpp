#include "node/completion_service.hpp"

namespace brigade::node {

HeadCompletionService::HeadCompletionService(ServeModel& model, SchedulerOptions options,
                                             std::shared_ptr<spdlog::logger> logger)
    : models_{model.info}, scheduler_(model, options, std::move(logger)) {}

void HeadCompletionService::start(api::CompletionRequest request,
                                  std::shared_ptr<api::CompletionSink> sink,
                                  std::shared_ptr<api::Cancellation> cancel) {
    if (api::find_model(models_, request.model) == nullptr) {
        sink->on_error({api::ErrorKind::model_not_found,
                        "model '" + request.model + "' not found (this node serves '" +
                            models_.front().id + "')",
                        "model"});
        return;
    }
    Job job{std::move(request), std::move(sink), std::move(cancel)};
    switch (scheduler_.submit(job)) {
        case BatchScheduler::Submitted::queued:
            break;
        case BatchScheduler::Submitted::queue_full:
            job.sink->on_error({api::ErrorKind::overloaded,
                                "the server is busy (all slots and the wait queue are full); "
                                "retry later",
                                ""});
            break;
        case BatchScheduler::Submitted::stopping:
            job.sink->on_error({api::ErrorKind::unavailable, "the server is shutting down", ""});
            break;
    }
}

api::Health HeadCompletionService::health() {
    api::Health h;
    h.state = api::HealthState::ok;
    return h;
}

}  // namespace brigade::node
