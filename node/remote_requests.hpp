#pragma once
// The head side of a request that entered at another node (the origin): a RequestFrame is
// checked, its generation setup decoded and it is submitted to this node's PipelineHead; the
// head's events go back to the origin as RequestUpdate frames (accepted, tokens) or one
// ErrorFrame naming the request:
//   503 unavailable  this node is not the head of a committed plan, the frame was routed by
//                    another epoch, or the head is stopping (the origin retries on the next plan)
//   429 overloaded   every slot and the wait queue are full
//   400 invalid      the setup does not decode, or the tokens do not fit it / the vocabulary
// Stateless: call it from the runtime's I/O thread for each RequestFrame.

#include <spdlog/logger.h>

#include "mesh/messages.hpp"
#include "node/pipeline_head.hpp"
#include "node/pipeline_types.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

// `from` is the link peer that sent the frame (it must be frame.origin). `head` is this node's
// PipelineHead for the committed plan, or null when this node is not a head. `sender` must
// outlive the request (the head's events send through it).
void accept_remote_request(const mesh::NodeId& from, mesh::RequestFrame frame, PipelineHead* head,
                           FrameSender& sender, spdlog::logger& logger);

}  // namespace brigade::node
