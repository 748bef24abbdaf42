#include "node/pipeline_hops.hpp"

namespace brigade::node {
namespace {

api::Hop hop(const mesh::NodeId& from, const mesh::NodeId& to, const LinkRtts& rtts) {
    api::Hop h{from.short_string(), to.short_string(), -1.0};
    auto it = rtts.find({from, to});
    if (it == rtts.end()) it = rtts.find({to, from});
    if (it != rtts.end()) h.latency_ms = it->second / 2000.0;
    return h;
}

}  // namespace

std::vector<api::Hop> pipeline_hops(const PipelineRoute& route, const mesh::NodeId& origin,
                                    const LinkRtts& rtts) {
    std::vector<api::Hop> hops;
    if (route.stages.empty()) return hops;
    const mesh::NodeId& head = route.head();
    if (origin != head) hops.push_back(hop(origin, head, rtts));
    for (std::size_t i = 0; i + 1 < route.stages.size(); ++i) {
        hops.push_back(hop(route.stages[i].node, route.stages[i + 1].node, rtts));
    }
    if (route.stages.size() > 1) hops.push_back(hop(route.tail(), head, rtts));
    if (origin != head) hops.push_back(hop(head, origin, rtts));
    return hops;
}

}  // namespace brigade::node
