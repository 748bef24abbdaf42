#pragma once
// The network hops of a pipeline's requests and their latencies as the mesh measured them,
// for each request's log line (api::Timings::hops).

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "api/completion_service.hpp"
#include "mesh/identity.hpp"
#include "node/pipeline_types.hpp"

namespace brigade::node {

// Round trips the mesh measured, in microseconds, by (measuring node, peer); unmeasured links
// are absent.
using LinkRtts = std::map<std::pair<mesh::NodeId, mesh::NodeId>, std::uint32_t>;

// The hops of a request that entered at `origin` and runs on `route`: origin to head (when
// they differ), each stage to the next, the tail's tokens back to the head, and the head's
// tokens to the origin. Each latency is half the round trip that one end measured (the
// sender's, else the receiver's), or -1 where neither did. Empty when one node does it all.
std::vector<api::Hop> pipeline_hops(const PipelineRoute& route, const mesh::NodeId& origin,
                                    const LinkRtts& rtts);

}  // namespace brigade::node
