#pragma once
// The seam between the mesh runtime (mesh_runtime*.{hpp,cpp}: links, discovery, membership,
// plans) and the pipeline compute (pipeline_head, stage_worker, mesh_completion_service).
//
// Data flow of one request (issue 6, "Serving through the pipeline"):
//   origin (the node whose HTTP API took it): templates + tokenizes once, builds the
//     GenerationSetup, sends RequestFrame to the head (or calls the local head directly).
//   head: admits it (RequestUpdate{accepted}), runs its layers over micro-batches, sends
//     ActivationFrames to the next stage.
//   middle stages: run their layers, forward.
//   tail: runs its layers and the lm_head, samples with the setup it got with the first chunk,
//     sends a TokenFrame back to the head.
//   head: feeds each token into the next decode step and forwards it to the origin
//     (RequestUpdate{tokens}); the origin detokenizes and streams to its client.
// A one-node mesh is the same with head == tail == origin and no frames at all.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/completion_service.hpp"
#include "mesh/identity.hpp"
#include "mesh/messages.hpp"
#include "model/backend.hpp"
#include "model/forward.hpp"

namespace brigade::node {

// Request ids never have this bit set (origins do not draw such ids, heads refuse them): the
// stages keep cached prompt prefixes under ids that do (mesh/PROTOCOL.md, KvPrefix).
inline constexpr std::uint64_t kPrefixEntryBit = std::uint64_t{1} << 63;

// Sends frames to other nodes over the mesh's encrypted links. Implemented by the mesh runtime.
// Thread-safe and non-blocking (compute threads call it; the frame is queued to the link's I/O
// thread). A frame to a node without a link is dropped and logged at debug level: a lost peer is
// handled by membership and re-planning, not by the sender.
class FrameSender {
public:
    virtual ~FrameSender() = default;
    virtual void send(const mesh::NodeId& to, mesh::Message message) = 0;
};

// The committed plan, as the compute side needs it.
struct PipelineRoute {
    std::uint64_t epoch = 0;
    mesh::NodeId self;
    std::vector<mesh::StageAssignment> stages;  // in layer order; front() is the head
    mesh::ActivationDType activations = mesh::ActivationDType::kBF16;
    // Several stages: KV positions every stage holds beside its weights (mesh::
    // pipeline_kv_positions), which the head keeps its sequences within. 0: no bound.
    std::uint64_t kv_positions = 0;

    const mesh::NodeId& head() const { return stages.front().node; }
    const mesh::NodeId& tail() const { return stages.back().node; }
    // Index of `id` among the stages, or -1.
    int index_of(const mesh::NodeId& id) const {
        for (std::size_t i = 0; i < stages.size(); ++i) {
            if (stages[i].node == id) return static_cast<int>(i);
        }
        return -1;
    }
};

// A loaded layer range. Members are destroyed in reverse order: the stage before its backend.
struct StageResources {
    std::unique_ptr<model::Backend> backend;
    std::unique_ptr<model::Stage> stage;
};

// Where the head reports a request's progress: the origin's own stream when the request entered
// at the head, or a proxy that sends RequestUpdate / ErrorFrame to the origin node. Calls for one
// request never overlap and must not block. After on_failed, or a token whose finish is not
// kContinue, nothing more is reported.
class RequestEvents {
public:
    virtual ~RequestEvents() = default;
    virtual void on_accepted(std::uint32_t cached_tokens) = 0;
    virtual void on_tokens(std::vector<mesh::SampledTokenInfo> tokens) = 0;
    virtual void on_failed(api::ErrorKind kind, std::string message) = 0;
    // The request still waits at the head, queued for a slot or paused for KV room: nothing
    // new, but the head holds it (PipelineHeadOptions::waiting_update_interval).
    virtual void on_waiting() {}
};

// ErrorFrame::code for a request is the api::ErrorKind's integer value.
inline std::uint32_t error_code_of(api::ErrorKind kind) { return static_cast<std::uint32_t>(kind); }
inline api::ErrorKind error_kind_of(std::uint32_t code) {
    return code <= static_cast<std::uint32_t>(api::ErrorKind::not_supported)
               ? static_cast<api::ErrorKind>(code)
               : api::ErrorKind::internal;
}

}  // namespace brigade::node
