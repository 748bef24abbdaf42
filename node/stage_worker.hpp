#pragma once
// A stage that is not the head: receives hidden states, runs its layers, and forwards them to the
// next stage, or (the tail) applies the lm_head, samples each entry that wants a token with its
// TokenSampler and sends the tokens back to the head in one TokenFrame per micro-batch.
//
// One compute thread; frames are processed in arrival order. A frame of another epoch is dropped
// with a log line. An entry whose positions do not match this stage's KV, an undecodable frame,
// or an engine error fails the requests concerned: an ErrorFrame (code `internal`, naming the
// request) goes to the head, which fails the request and keeps serving. A stage never crashes
// on a bad frame.

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>

#include "mesh/messages.hpp"
#include "node/pipeline_head.hpp"
#include "node/pipeline_types.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

class StageWorker {
public:
    StageWorker(const ModelFrontend& model, std::shared_ptr<StageResources> resources,
                PipelineRoute route, FrameSender& sender, std::shared_ptr<spdlog::logger> logger);
    ~StageWorker();  // stop()
    StageWorker(const StageWorker&) = delete;
    StageWorker& operator=(const StageWorker&) = delete;

    // Thread-safe, never blocks.
    void on_activation(mesh::ActivationFrame frame);
    // Thread-safe: the request ended (head's Cancel): free its KV and sampler, after the frames
    // queued before it; the Cancel is then forwarded to the next stage, so that it never
    // overtakes that request's last activations.
    void release(std::uint64_t request_id);
    // Thread-safe: a prefix-cache operation of the head (keep a finished request's KV as an
    // entry, start a new request from an entry, drop an entry), applied in order with the
    // frames queued before it and then forwarded to the next stage.
    void on_kv_prefix(mesh::KvPrefix op);
    void stop();

    const PipelineRoute& route() const { return route_; }
    StageTimings timings() const;
    // KV sequences on this stage: running requests and cached prefixes (tests, /v1/mesh).
    std::size_t n_kv_sequences() const;

private:
    struct Impl;
    PipelineRoute route_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace brigade::node
