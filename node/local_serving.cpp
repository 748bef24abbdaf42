#include "node/local_serving.hpp"

namespace brigade::node {
namespace {

// A one-stage plan sends no frames.
class NoFrames final : public FrameSender {
public:
    void send(const mesh::NodeId&, mesh::Message) override {}
};

class FixedDirectory final : public PipelineDirectory {
public:
    explicit FixedDirectory(ActivePipeline pipeline) : pipeline_(std::move(pipeline)) {}
    std::optional<ActivePipeline> active(std::string&) override { return pipeline_; }

private:
    ActivePipeline pipeline_;
};

PipelineRoute one_stage_route(const ModelFrontend& model, const mesh::NodeId& self) {
    PipelineRoute route;
    route.epoch = 1;
    route.self = self;
    route.stages.push_back({self, 0, model.config.n_layers});
    route.activations = mesh::ActivationDType::kF32;
    return route;
}

}  // namespace

struct LocalServing::Impl {
    NoFrames frames;
    std::shared_ptr<PipelineHead> head;
    std::unique_ptr<FixedDirectory> directory;
    std::unique_ptr<MeshCompletionService> service;
};

LocalServing::LocalServing(const ModelFrontend& model, std::shared_ptr<StageResources> resources,
                           mesh::NodeId self, LocalServingOptions options,
                           std::shared_ptr<spdlog::logger> logger)
    : impl_(std::make_unique<Impl>()) {
    auto route = one_stage_route(model, self);
    options.service.resume_grace = std::chrono::milliseconds(0);  // no other pipeline, ever
    impl_->head = std::make_shared<PipelineHead>(model, std::move(resources), route, nullptr,
                                                 options.head, logger);
    impl_->directory =
        std::make_unique<FixedDirectory>(ActivePipeline{std::move(route), impl_->head});
    impl_->service = std::make_unique<MeshCompletionService>(
        model, self, *impl_->directory, impl_->frames, options.sampling, logger, options.service);
}

LocalServing::~LocalServing() {
    stop();
    impl_->service.reset();
    impl_->directory.reset();
    impl_->head.reset();
}

api::CompletionService& LocalServing::service() { return *impl_->service; }
PipelineHead& LocalServing::head() { return *impl_->head; }

void LocalServing::stop(std::chrono::milliseconds drain) {
    impl_->head->stop(drain);
    impl_->service->stop();
}

}  // namespace brigade::node
