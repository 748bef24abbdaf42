// The hops a request's log line names (node/pipeline_hops.hpp): which links a request crosses
// on a pipeline, entered at its head or elsewhere, and each link's latency from the mesh's
// round trips.

#include "node/pipeline_hops.hpp"

#include <gtest/gtest.h>

namespace brigade::node {
namespace {

mesh::NodeId id(int i) {
    mesh::NodeId n;
    n.bytes[0] = static_cast<std::uint8_t>(0x10 * (i + 1));
    return n;
}

PipelineRoute route(std::initializer_list<int> nodes) {
    PipelineRoute r;
    r.epoch = 3;
    std::int32_t layer = 0;
    for (int n : nodes) {
        r.stages.push_back({id(n), layer, layer + 4});
        layer += 4;
    }
    return r;
}

api::Hop hop(int from, int to, double ms) {
    return {id(from).short_string(), id(to).short_string(), ms};
}

TEST(PipelineHops, OneNodeServingAloneHasNone) {
    EXPECT_TRUE(pipeline_hops(route({0}), id(0), {{{id(0), id(1)}, 500}}).empty());
    EXPECT_TRUE(pipeline_hops(PipelineRoute{}, id(0), {}).empty());
}

TEST(PipelineHops, EnteredAtTheHeadItGoesDownTheStagesAndBack) {
    const LinkRtts rtts = {{{id(0), id(1)}, 400}, {{id(1), id(2)}, 1000}, {{id(2), id(0)}, 300}};
    EXPECT_EQ(pipeline_hops(route({0, 1, 2}), id(0), rtts),
              (std::vector<api::Hop>{hop(0, 1, 0.2), hop(1, 2, 0.5), hop(2, 0, 0.15)}));
}

// The sender's own measurement first; the receiver's where the sender has none; unmeasured
// links are -1. Entered elsewhere, the request first reaches the head and its tokens come back.
TEST(PipelineHops, EnteredElsewhereItReachesTheHeadAndComesBack) {
    const LinkRtts rtts = {{{id(3), id(0)}, 800}, {{id(0), id(3)}, 600}, {{id(1), id(0)}, 200}};
    EXPECT_EQ(
        pipeline_hops(route({0, 1}), id(3), rtts),
        (std::vector<api::Hop>{hop(3, 0, 0.4), hop(0, 1, 0.1), hop(1, 0, 0.1), hop(0, 3, 0.3)}));
    EXPECT_EQ(pipeline_hops(route({0}), id(3), {}),
              (std::vector<api::Hop>{hop(3, 0, -1.0), hop(0, 3, -1.0)}));
}

}  // namespace
}  // namespace brigade::node
