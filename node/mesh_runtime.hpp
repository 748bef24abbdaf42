#pragma once
// The mesh runtime of a node (issue 6): links, discovery, membership, capacity, planning and
// agreement, driven on one I/O thread of its own, around the sans-io pieces of mesh/.
//
//  - Links (mesh_runtime_links.cpp): a TcpListener plus dialling of seeds, `--peer`s and
//    discovered or gossiped peers, with backoff; one link per pair of nodes (when both dial, the
//    link dialled by the lower node id wins on both sides); frames to a node go through one
//    ordered queue per link. Implements FrameSender for the compute threads.
//  - Members (mesh_runtime_members.cpp): multicast beacons, PeerList gossip, Membership
//    (an open link counts as hearing from its peer: the link's keepalives prove it), capacity
//    reports broadcast on link-up and every `capacity_interval`.
//  - Planning (mesh_runtime_planning.cpp): every node plans over the alive members' capacity
//    reports once membership settles (`plan_debounce`); the coordinator (mesh::Agreement: the
//    lowest alive id) proposes when the plan differs from the active one. Stages load on a
//    loader thread while the active plan keeps serving; a commit activates the new pipeline.
//  - Dispatch (mesh_runtime_dispatch.cpp): control frames are handled here, pipeline frames go
//    to the PipelineHost.
//
// The compute side is reached only through `PipelineHost`, so the runtime can be tested with
// fakes (tests/unit/node/mesh_runtime_*_test.cpp); mesh_runtime_pipeline.hpp is the real one.

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mesh/discovery.hpp"
#include "mesh/errors.hpp"
#include "mesh/identity.hpp"
#include "mesh/membership.hpp"
#include "mesh/messages.hpp"
#include "model/types.hpp"
#include "node/pipeline_hops.hpp"
#include "node/pipeline_types.hpp"

namespace brigade::node {

struct MeshRuntimeOptions {
    // Links.
    std::string listen_host = "0.0.0.0";
    std::uint16_t listen_port = mesh::kDefaultMeshPort;  // 0: any free port
    // When `listen_port` is busy, listen on any free port instead of failing (the default port
    // was not asked for explicitly; peers learn the real port from beacons and gossip).
    bool fallback_to_any_port = false;
    std::vector<mesh::PeerAddress> seeds;  // --peer and the invite token's addresses
    std::chrono::milliseconds connect_timeout{3000};
    std::chrono::milliseconds handshake_timeout{3000};
    std::chrono::milliseconds keepalive_interval{500};
    std::chrono::milliseconds redial_min{200};
    std::chrono::milliseconds redial_max{5000};

    // Discovery and membership.
    bool discovery = true;
    std::string discovery_group{mesh::kDefaultMulticastGroup};
    std::uint16_t discovery_port = mesh::kDefaultMeshPort;
    std::chrono::milliseconds beacon_interval{1000};
    mesh::MembershipConfig membership;  // suspect_after / dead_after
    std::chrono::milliseconds capacity_interval{2000};
    std::chrono::milliseconds tick_interval{100};

    // Planning.
    std::chrono::milliseconds plan_debounce{400};
    std::chrono::milliseconds plan_retry{1500};  // after a failed proposal
    // How long planning waits for every member to report a link to every other.
    std::chrono::milliseconds mesh_settle_limit{3000};
    // How long a starting node that finds no fit waits for links to the nodes its members link
    // to (requests wait as while forming) before it answers "no fit".
    std::chrono::milliseconds partial_view_limit{10000};
    int expect_nodes = 0;                         // wait for this many members before planning
    std::chrono::milliseconds expect_wait{8000};  // ... but no longer than this
    std::chrono::milliseconds ack_timeout{120000};

    // This node's offer and the model (the same model on every node).
    std::uint64_t memory_bytes = 0;
    std::string backend = "cpu";
    double seconds_per_layer = 0;
    std::string model_id;
    model::ModelShape shape;
    bool tied_embeddings = false;
    int context_tokens = 4096;
    int expected_concurrency = 1;
    mesh::ActivationDType activations = mesh::ActivationDType::kBF16;
};

// The compute side of a node as the runtime sees it. Called on the runtime's I/O thread unless
// said otherwise; nothing here may block for long.
class PipelineHost {
public:
    virtual ~PipelineHost() = default;
    // Loader thread: load layers `range` for the proposal `epoch` and keep them until
    // `activate` or `drop_stage` for that epoch. Returns an error message, or nullopt when ready.
    virtual std::optional<std::string> load_stage(std::uint64_t epoch, model::LayerRange range) = 0;
    // Loader thread (after the loads queued before it): forget what was loaded for `epoch`.
    virtual void drop_stage(std::uint64_t epoch) = 0;
    // Plan `route.epoch` committed: build this node's part (head, worker or nothing), swap it in,
    // stop the previous one.
    virtual void activate(PipelineRoute route) = 0;
    // No pipeline can serve (no plan yet, a stage node left, the model fits nowhere, stopping):
    // stops this node's part. With `plan_expected` (the mesh is forming or re-planning) requests
    // may wait for the next activate; without it they get 503 with `why` at once.
    virtual void deactivate(std::string why, bool plan_expected) = 0;
    // A pipeline frame (RequestFrame, ActivationFrame, TokenFrame, Cancel, RequestUpdate,
    // ErrorFrame) from `from`.
    virtual void on_pipeline_frame(const mesh::NodeId& from, mesh::Message message) = 0;
    // `id` left the mesh (dead or said goodbye).
    virtual void on_member_gone(const mesh::NodeId& id) = 0;
    // The link to `peer` closed, or another replaced it: frames on their way on it are lost.
    virtual void on_link_down(const mesh::NodeId& peer) { (void)peer; }
    // A link to `peer` is up (again, after on_link_down, or for the first time). Called before
    // its first frame is read.
    virtual void on_link_up(const mesh::NodeId& peer) { (void)peer; }
    // This node's stage timings for its capacity report (epoch 0: no stage).
    virtual mesh::StageStats stage_stats() = 0;
    // Every tick of the runtime (about 100 ms), for the host's own deadlines.
    virtual void on_tick() {}
    // The links' round trips (this node's own as measured now, the others' as their nodes last
    // reported them), every tick.
    virtual void on_link_rtts(LinkRtts rtts) { (void)rtts; }
};

class MeshRuntime {
public:
    MeshRuntime(mesh::NodeKey key, mesh::MeshCredentials credentials, MeshRuntimeOptions options,
                std::shared_ptr<spdlog::logger> logger);
    ~MeshRuntime();  // stop()
    MeshRuntime(const MeshRuntime&) = delete;
    MeshRuntime& operator=(const MeshRuntime&) = delete;

    // Frames to other nodes (valid from construction; frames sent before start are dropped).
    FrameSender& sender();
    const mesh::NodeId& self() const;

    // Opens the listener (port() is known afterwards) and beacons, and starts the I/O and
    // loader threads. `host` must outlive stop().
    mesh::Result<void> start(PipelineHost& host);
    std::uint16_t port() const;
    // Where peers can reach this node: the listen address, or every interface address when
    // listening on 0.0.0.0 / :: (loopback included), with port().
    std::vector<mesh::PeerAddress> self_addresses() const;

    // The /v1/mesh JSON (node/mesh_status.hpp). Thread-safe; waits up to 2 s for the I/O thread.
    nlohmann::json status();
    // Thread-safe: true once a pipeline was activated at least once, or the first plan found
    // that the model fits nowhere (then requests get 503 with the reason).
    bool settled() const;
    // Calls `on_settled` once, from the I/O thread, when settled() becomes true.
    void set_on_settled(std::function<void()> on_settled);

    // Graceful leave, before stop(): this node offers no memory any more, so the coordinator
    // re-plans around it while the current plan keeps serving (requests in flight move to the new
    // pipeline). Returns once the committed plan no longer needs this node (true), or when it
    // cannot be handed over (alone, or the others cannot hold the model) or `limit` passes
    // (false). Thread-safe.
    bool leave(std::chrono::milliseconds limit);

    // Says goodbye on every link (peers drop this node at once), stops the threads. Idempotent.
    void stop();

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

// Every address of this host's interfaces that is up (IPv4 and IPv6, loopback last), for the
// invite token and gossip when listening on a wildcard address.
std::vector<std::string> interface_addresses();

}  // namespace brigade::node
