#pragma once
// The head of the pipeline: continuous batching over the requests routed to this node.
//
// One compute thread. Each step builds a micro-batch from the sequences that are *ready* (their
// last token is known): prefill chunks of newly admitted requests (at most `prefill_chunk`
// prompt tokens per step over all of them) plus one decode token per generating sequence, runs
// this node's layers, and then either
//  - samples locally (this node is also the tail: a one-stage plan), or
//  - sends the hidden states to the next stage (ActivationFrame) and marks the sequences in
//    flight until the tail's TokenFrame comes back (`on_token_frame`).
// With k stages a micro-batch holds at most ceil(active / k) sequences, so k micro-batches are in
// the pipeline at once and no stage waits idle when there are k or more requests.
//
// At most `max_active` sequences hold KV at once; up to `max_queue` more wait; beyond that
// `submit` refuses (the origin answers 429). Finished or cancelled sequences free their KV here
// and, with a Cancel frame, on every other stage. Finished sequences leave their KV to the
// prefix cache; with several stages the others mirror it (KvPrefix frames). Within the stage's
// KV budget (serve --memory), cached prefixes give way to running sequences, a new sequence that
// does not fit waits for a running one to end, and on one stage a sequence that outgrows it
// gives its KV back and recomputes it when room frees (see reserve_batch_kv).

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mesh/messages.hpp"
#include "node/generation.hpp"
#include "node/pipeline_types.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct PipelineHeadOptions {
    int max_active = 4;
    int max_queue = 64;
    int prefill_chunk = 512;
    std::uint64_t prefix_cache_bytes = std::uint64_t{256} << 20;
    // Several stages: a sequence whose token has not come back from the tail within this time
    // fails with `unavailable` (a lost stage is normally noticed sooner by membership).
    std::chrono::milliseconds token_timeout{60000};
    // A request that waits here (queued for a slot, or paused for KV room) is reported as
    // waiting this often (RequestEvents::on_waiting), so that the node it entered at does not
    // take a long queue for a lost head (MeshServiceOptions::remote_stall_timeout).
    std::chrono::milliseconds waiting_update_interval{10000};
};

// A request as the head receives it (from the local origin or decoded from a RequestFrame).
struct HeadRequest {
    std::uint64_t request_id = 0;
    std::vector<std::int32_t> tokens;  // prompt, then tokens generated before a resume
    GenerationSetup setup;             // setup.n_prompt says where the prompt ends
    std::string log_id;                // for log lines (the API request id when known)
    mesh::NodeId origin;               // the node streaming it to its client; zero: this node
};

struct StageTimings {
    std::uint64_t steps = 0;
    std::uint64_t tokens = 0;
    double mean_step_us = 0;  // exponential moving average
    // Head of several stages: the most micro-batches waiting for the tail's tokens at once
    // (2 or more: the stages worked on different micro-batches at the same time).
    std::uint64_t max_batches_in_flight = 0;
};

class PipelineHead {
public:
    // `resources` holds layers [0, route.stages[0].last_layer). `sender` may be null for a
    // one-stage plan.
    PipelineHead(const ModelFrontend& model, std::shared_ptr<StageResources> resources,
                 PipelineRoute route, FrameSender* sender, PipelineHeadOptions options,
                 std::shared_ptr<spdlog::logger> logger);
    ~PipelineHead();  // stop(0)
    PipelineHead(const PipelineHead&) = delete;
    PipelineHead& operator=(const PipelineHead&) = delete;

    enum class Submitted { queued, queue_full, stopping, invalid };
    // Thread-safe, never blocks. Unless `queued`, `events` is not called (the caller answers).
    Submitted submit(HeadRequest request, std::shared_ptr<RequestEvents> events);
    // Thread-safe: the tail's tokens for a micro-batch (ignored if of another epoch).
    void on_token_frame(mesh::TokenFrame frame);
    // Thread-safe: the origin cancelled (client gone, stop string): stop generating, free KV
    // here and (Cancel frames along the pipeline) on every other stage. Unknown ids are ignored.
    // `events` is not called for a cancelled request.
    void cancel(std::uint64_t request_id);
    // Thread-safe: the node `origin` left the mesh; its requests are cancelled (nobody would
    // read their tokens).
    void cancel_origin(const mesh::NodeId& origin);
    // Thread-safe: a stage failed one of this head's requests (ErrorFrame with a request id from
    // a stage of this route): the request fails with that error and its KV is freed everywhere.
    // Returns false when the id is not one of this head's requests (the runtime then hands the
    // frame to MeshCompletionService::on_request_error).
    bool on_stage_error(const mesh::NodeId& from, const mesh::ErrorFrame& error);

    // Stops admitting; lets running requests finish for up to `drain`, then fails what is left
    // with `unavailable` and ends the compute thread. Idempotent.
    void stop(std::chrono::milliseconds drain);

    const PipelineRoute& route() const { return route_; }
    StageTimings timings() const;
    std::size_t n_active() const;
    std::size_t n_waiting() const;
    // Sequences in this stage's KV cache, the prefix cache's included (tests, /v1/mesh).
    std::size_t n_kv_sequences() const;
    // Sequences that gave their KV back to wait for room (on every stage) and computed their
    // tokens again when they resumed.
    std::uint64_t n_preempted() const;
    // KV positions this head keeps its sequences within (its cache's budget), 0: no bound.
    std::uint64_t kv_positions() const;

private:
    struct Impl;
    PipelineRoute route_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace brigade::node
