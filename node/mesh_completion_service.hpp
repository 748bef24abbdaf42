#pragma once
// `api::CompletionService` on every node of a mesh (a node alone is a mesh of one): the origin
// side of a request. Templates and tokenizes where the request entered, builds its
// GenerationSetup, and sends it to the current pipeline head: straight into the local
// PipelineHead when this node is the head, else as a RequestFrame over the mesh. Tokens come back
// (RequestEvents locally, RequestUpdate / ErrorFrame frames from a remote head) and are
// detokenized and streamed to the client here. A client disconnect or a stop string cancels the
// request at the head.
//
// The origin keeps each request's prompt, setup and the tokens generated so far, so that a
// request whose pipeline is lost can be resubmitted to the next one (issue 7).

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/completion_service.hpp"
#include "node/pipeline_head.hpp"
#include "node/pipeline_types.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

// What the origin routes by. The runtime swaps it when a plan commits.
struct ActivePipeline {
    PipelineRoute route;
    std::shared_ptr<PipelineHead> local_head;  // set when this node is the head
    // The hops of a request entering here, with the mesh's latest latencies (pipeline_hops).
    std::vector<api::Hop> hops = {};
};

// Implemented by the mesh runtime. Thread-safe.
class PipelineDirectory {
public:
    virtual ~PipelineDirectory() = default;
    // The committed pipeline, or nullopt with `why` set ("no plan yet", "re-planning",
    // "the mesh cannot hold the model: ..."): requests then get 503 at once.
    virtual std::optional<ActivePipeline> active(std::string& why) = 0;
    // True while there is no pipeline but one is being formed (the mesh is forming, or
    // re-planning after a stage left): requests then wait for it (up to
    // MeshServiceOptions::plan_wait) instead of failing at once. False when the mesh cannot
    // hold the model: that is a 503 at once.
    virtual bool plan_expected() { return false; }
};

struct MeshServiceOptions {
    // A request whose remote head has said nothing (no accept, no token, no "still waiting")
    // for this long fails with `unavailable`. A head reports its queued and paused requests as
    // waiting every PipelineHeadOptions::waiting_update_interval (10 s), so only a head that
    // hangs or lost the request, not a long queue, runs into this.
    std::chrono::milliseconds remote_stall_timeout{120000};
    // Requests accepted from clients but not yet templated; beyond this, 429.
    std::size_t max_pending = 1024;
    // A request its head failed with `unavailable` while no newer pipeline is known waits this
    // long for one (a head may learn of a new plan before this node does); then it fails.
    // Zero: never wait (a single node has no other pipeline).
    std::chrono::milliseconds resume_grace{5000};
    // A parked request waits this long while the directory says a plan is being formed: a
    // re-plan takes the membership's dead-after (6 s by default) plus loading the new stages,
    // which on a slow or busy machine is well past resume_grace.
    std::chrono::milliseconds plan_wait{60000};
};

class MeshCompletionService final : public api::CompletionService {
public:
    // `directory` and `sender` must outlive the service. A PipelineHead this service submitted
    // to keeps only weak references to it: destroying the service first is safe.
    MeshCompletionService(const ModelFrontend& model, mesh::NodeId self,
                          PipelineDirectory& directory, FrameSender& sender,
                          SamplingDefaults defaults, std::shared_ptr<spdlog::logger> logger,
                          MeshServiceOptions options = {});
    ~MeshCompletionService() override;

    // api::CompletionService (I/O threads).
    void start(api::CompletionRequest request, std::shared_ptr<api::CompletionSink> sink,
               std::shared_ptr<api::Cancellation> cancel) override;
    std::vector<api::ModelInfo> list_models() override;
    api::Health health() override;

    // Frames from a remote head about requests that entered here (the runtime's I/O thread).
    void on_request_update(const mesh::NodeId& from, mesh::RequestUpdate update);
    void on_request_error(const mesh::NodeId& from, const mesh::ErrorFrame& error);
    // A node left the mesh or a new plan committed. Every request routed by an older epoch is
    // resumed on the active pipeline (prompt + the tokens generated so far, same setup: the
    // client's stream simply continues; its old head gets a Cancel); with no active pipeline,
    // every request fails with 503 and the directory's reason. A request failed by its head
    // with `unavailable` (a head that stopped) is resumed the same way when a newer pipeline
    // is active.
    void on_pipeline_changed();
    // The link to `peer` closed, or another replaced it (the runtime's I/O thread): frames on
    // their way on it are lost, tokens and Cancels included, and nobody would notice. Every
    // request whose remote head is `peer` ignores the rest of its current attempt from now on
    // (what it received is a contiguous prefix: frames of a new link are read after this call).
    void on_link_down(const mesh::NodeId& peer);
    // A link to `peer` is up (the runtime's I/O thread, before its first frame is read). Every
    // request whose attempt was cut there resumes at once on the active pipeline from the
    // tokens it has (a parked one waits for the next plan as before), its old attempt
    // cancelled; and the Cancels sent to `peer` in the last minutes go again, as one lost on
    // the old link would leave the head running a request for nobody.
    void on_link_up(const mesh::NodeId& peer);

    // Requests still streaming (for a graceful stop).
    std::size_t n_in_flight() const;
    // Fails every request still in flight with `unavailable` (shutdown) and cancels it at its
    // head. Later requests still go to the directory; stop() refuses them.
    void fail_all(const std::string& why);
    // Refuses new requests (503) and ends the templating thread. Idempotent; the destructor
    // calls it.
    void stop();

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace brigade::node
