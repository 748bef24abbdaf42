// The planner's rules, table-driven: fits memory, fewest stages unless more raise throughput at
// the expected load, faster nodes take more layers, hop latency counts, never slower than one node
// that can hold the model, clear errors, deterministic.

#include "mesh/planner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace brigade::mesh {
namespace {

constexpr std::uint64_t kMB = 1000 * 1000;

NodeId id_of(std::uint8_t n) {
    NodeId id;
    id.bytes.fill(0);
    id.bytes[0] = n;
    return id;
}

model::ModelShape shape(int n_layers, std::uint64_t layer_bytes, std::uint64_t embedding = 20 * kMB,
                        std::uint64_t lm_head = 20 * kMB, std::uint64_t kv_per_token_layer = 0) {
    model::ModelShape s;
    s.n_layers = n_layers;
    s.hidden_size = 1024;
    s.vocab_size = 32000;
    s.layer_bytes.assign(n_layers, layer_bytes);
    s.embedding_bytes = embedding;
    s.lm_head_bytes = lm_head;
    s.kv_bytes_per_token_per_layer = kv_per_token_layer;
    return s;
}

NodeCapacity node(std::uint8_t n, std::uint64_t memory, double seconds_per_layer) {
    return NodeCapacity{id_of(n), memory, seconds_per_layer, "cpu"};
}

struct Expected {
    std::vector<std::pair<std::uint8_t, model::LayerRange>> stages;
};

struct Case {
    const char* name;
    model::ModelShape shape;
    std::vector<NodeCapacity> nodes;
    int concurrency;
    double rtt_s;
    Expected expected;
};

PlanRequest request_for(const Case& c) {
    PlanRequest r;
    r.shape = c.shape;
    r.nodes = c.nodes;
    r.expected_concurrency = c.concurrency;
    r.context_tokens = 1024;
    r.default_rtt_s = c.rtt_s;
    return r;
}

TEST(Planner, Table) {
    const std::vector<Case> cases = {
        {"one node holds the model: one stage",
         shape(24, 10 * kMB),
         {node(1, 1000 * kMB, 1e-3)},
         1,
         5e-4,
         {{{1, {0, 24}}}}},
        {"two equal nodes, one stream: no split (hops only cost), lowest id",
         shape(24, 10 * kMB),
         {node(2, 1000 * kMB, 1e-3), node(1, 1000 * kMB, 1e-3)},
         1,
         5e-4,
         {{{1, {0, 24}}}}},
        {"too big for either: split; the faster node takes what its memory allows",
         shape(24, 10 * kMB),
         {node(1, 200 * kMB, 2e-3), node(2, 180 * kMB, 1e-3)},
         1,
         5e-4,
         // The faster node 2 is the tail (it also runs lm_head): 180 MB - 20 MB lm_head = 16
         // layers.
         {{{1, {0, 8}}, {2, {8, 24}}}}},
        {"equal nodes, 4 streams: the split raises throughput",
         shape(24, 10 * kMB),
         {node(1, 1000 * kMB, 1e-3), node(2, 1000 * kMB, 1e-3)},
         4,
         5e-4,
         // Balanced once the tail's lm_head (2 layers' worth) is counted.
         {{{1, {0, 13}}, {2, {13, 24}}}}},
        {"equal nodes, 4 streams, 100 ms links: hops eat the gain, one stage",
         shape(24, 10 * kMB),
         {node(1, 1000 * kMB, 1e-3), node(2, 1000 * kMB, 1e-3)},
         4,
         0.1,
         {{{1, {0, 24}}}}},
        {"8 streams, must split, one node twice as fast: it takes twice the layers",
         shape(24, 10 * kMB),
         {node(1, 200 * kMB, 2e-3), node(2, 200 * kMB, 1e-3)},
         8,
         1e-4,
         {{{1, {0, 8}}, {2, {8, 24}}}}},
        {"a slow node that could hold it all vs a fast small one: the split is faster, so split",
         shape(24, 10 * kMB),
         {node(1, 1000 * kMB, 4e-3), node(2, 140 * kMB, 1e-3)},
         1,
         5e-4,
         {{{1, {0, 12}}, {2, {12, 24}}}}},
        {"tiny fast node whose share would not pay for the hop: one stage on the big node",
         shape(24, 10 * kMB),
         {node(1, 1000 * kMB, 1e-3), node(2, 35 * kMB, 0.9e-3)},
         1,
         5e-3,
         {{{1, {0, 24}}}}},
        {"three nodes needed",
         shape(30, 10 * kMB),
         {node(1, 120 * kMB, 1e-3), node(2, 120 * kMB, 1e-3), node(3, 120 * kMB, 1e-3)},
         1,
         5e-4,
         // Equal totals; the tail also runs lm_head, so it gets one layer less (max stage 11).
         {{{1, {0, 10}}, {2, {10, 21}}, {3, {21, 30}}}}},
        {"an extra node that is not needed stays out",
         shape(30, 10 * kMB),
         {node(1, 120 * kMB, 1e-3), node(2, 120 * kMB, 1e-3), node(3, 120 * kMB, 1e-3),
          node(4, 400 * kMB, 1e-3)},
         1,
         5e-4,
         {{{4, {0, 30}}}}},
    };
    for (const Case& c : cases) {
        auto plan = make_plan(request_for(c));
        ASSERT_TRUE(plan) << c.name << ": " << plan.error().what();
        std::vector<std::pair<std::uint8_t, model::LayerRange>> got;
        for (const PlannedStage& s : plan->stages) got.emplace_back(s.node.bytes[0], s.layers);
        EXPECT_EQ(got, c.expected.stages) << c.name << "\n" << plan->explanation;
        // Every plan covers every layer exactly once, in order, within each node's memory.
        int next = 0;
        for (const PlannedStage& s : plan->stages) {
            EXPECT_EQ(s.layers.first, next) << c.name;
            EXPECT_GT(s.layers.size(), 0) << c.name;
            next = s.layers.last;
            const auto it = std::find_if(c.nodes.begin(), c.nodes.end(),
                                         [&](const NodeCapacity& n) { return n.id == s.node; });
            ASSERT_NE(it, c.nodes.end());
            EXPECT_LE(s.memory_bytes, it->memory_bytes) << c.name;
        }
        EXPECT_EQ(next, c.shape.n_layers) << c.name;
        EXPECT_GT(plan->single_stream_tok_s, 0) << c.name;
    }
}

TEST(Planner, NeverSlowerThanOneNodeThatHoldsTheModel) {
    // Sweep speeds and link costs: whenever a single node could hold the model, the chosen plan's
    // predicted throughput is at least that node's alone.
    for (double fast : {0.5e-3, 1e-3, 2e-3}) {
        for (double rtt : {1e-4, 1e-3, 1e-2}) {
            for (int streams : {1, 2, 4, 8}) {
                PlanRequest r;
                r.shape = shape(32, 10 * kMB);
                r.nodes = {node(1, 1000 * kMB, 1e-3), node(2, 200 * kMB, fast),
                           node(3, 150 * kMB, fast * 1.5)};
                r.expected_concurrency = streams;
                r.default_rtt_s = rtt;
                auto plan = make_plan(r);
                ASSERT_TRUE(plan);
                PlanRequest alone = r;
                alone.nodes = {r.nodes[0]};
                auto single = make_plan(alone);
                ASSERT_TRUE(single);
                EXPECT_GE(plan->aggregate_tok_s, single->aggregate_tok_s * (1 - 1e-9))
                    << "fast=" << fast << " rtt=" << rtt << " streams=" << streams << "\n"
                    << plan->explanation;
            }
        }
    }
}

TEST(Planner, HopLatencyIsCounted) {
    PlanRequest r;
    r.shape = shape(24, 10 * kMB);
    r.nodes = {node(1, 150 * kMB, 1e-3), node(2, 150 * kMB, 1e-3)};
    r.default_rtt_s = 0.010;
    auto plan = make_plan(r);
    ASSERT_TRUE(plan);
    ASSERT_EQ(plan->stages.size(), 2u);
    // One forward hop (rtt/2 + activations over bandwidth) and the token back (rtt/2).
    const double activations = 1024.0 * 2 / r.default_bandwidth_bytes_per_s;
    EXPECT_NEAR(plan->hop_s, 0.010 + activations, 1e-9);
    // 24 layers + lm_head (20 MB = 2 layers' worth) on the tail.
    EXPECT_NEAR(plan->single_stream_tok_s, 1 / (26 * 1e-3 + plan->hop_s), 1e-6);
    // A measured link overrides the default.
    r.links = {LinkCost{id_of(2), id_of(1), 0.002, 1e9}};
    auto measured = make_plan(r);
    ASSERT_TRUE(measured);
    EXPECT_NEAR(measured->hop_s, 0.002 + 1024.0 * 2 / 1e9, 1e-9);
}

TEST(Planner, UnmeasuredLinksCostTheMedianMeasuredOne) {
    EXPECT_DOUBLE_EQ(median_measured_rtt_s({}, 0.0005), 0.0005);
    const std::vector<LinkCost> links = {LinkCost{id_of(1), id_of(2), 0.0001, 0},
                                         LinkCost{id_of(1), id_of(3), 0, 0},  // not measured
                                         LinkCost{id_of(2), id_of(3), 0.009, 0},
                                         LinkCost{id_of(3), id_of(4), 0.0002, 0}};
    EXPECT_DOUBLE_EQ(median_measured_rtt_s(links, 0.0005), 0.0002);
    EXPECT_DOUBLE_EQ(median_measured_rtt_s({LinkCost{id_of(1), id_of(2), 0, 0}}, 0.0005), 0.0005);

    // Three stages over four nodes; node 4, the fastest, belongs at the tail. Links of 0.1 ms
    // are measured among nodes 1-3, node 4's not yet: charged 0.5 ms, they would keep it out;
    // charged the median, the plan is the one the fully measured mesh gets.
    PlanRequest r;
    r.shape = shape(4, 10 * kMB, 20 * kMB, 20 * kMB);
    for (std::uint8_t n = 1; n <= 4; ++n)
        r.nodes.push_back(node(n, 32 * kMB, n == 4 ? 5e-5 : 1e-4));
    for (std::uint8_t a = 1; a <= 4; ++a) {
        for (std::uint8_t b = a + 1; b <= 4; ++b) r.links.push_back({id_of(a), id_of(b), 1e-4, 0});
    }
    const auto measured = make_plan(r);
    ASSERT_TRUE(measured);
    ASSERT_EQ(measured->stages.size(), 3u);
    EXPECT_EQ(measured->stages.back().node, id_of(4));
    r.links.erase(std::remove_if(r.links.begin(), r.links.end(),
                                 [](const LinkCost& l) { return l.b == id_of(4); }),
                  r.links.end());
    r.default_rtt_s = median_measured_rtt_s(r.links, r.default_rtt_s);
    const auto partly = make_plan(r);
    ASSERT_TRUE(partly);
    ASSERT_EQ(partly->stages.size(), measured->stages.size());
    for (std::size_t i = 0; i < measured->stages.size(); ++i) {
        EXPECT_EQ(partly->stages[i].node, measured->stages[i].node) << "stage " << i;
        EXPECT_EQ(partly->stages[i].layers.last, measured->stages[i].layers.last) << "stage " << i;
    }
}

TEST(Planner, KvCacheForTheExpectedContextCountsAgainstMemory) {
    PlanRequest r;
    r.shape = shape(24, 10 * kMB, 20 * kMB, 20 * kMB, /*kv per token per layer=*/1000);
    r.nodes = {node(1, 400 * kMB, 1e-3), node(2, 400 * kMB, 1e-3)};
    r.context_tokens = 1000;  // 1 MB of KV per layer per stream
    auto small = make_plan(r);
    ASSERT_TRUE(small);
    EXPECT_EQ(small->stages.size(), 1u);  // 240 + 40 + 24 MB
    r.expected_concurrency = 8;           // 8 MB per layer: 24 * 18 + 40 = 472 MB > 400 MB
    r.min_gain_per_extra_stage = 1e9;     // only memory may force a split here
    auto big = make_plan(r);
    ASSERT_TRUE(big) << big.error().what();
    EXPECT_EQ(big->stages.size(), 2u);
    for (const PlannedStage& s : big->stages) EXPECT_LE(s.memory_bytes, 400 * kMB);
}

// A node whose KV cache is f32 (--kv-f32) needs twice the KV bytes of one with the default f16
// cache; the plan sizes each stage by the node that holds it, not by the planner's own shape.
TEST(Planner, EachNodesKvBytesSizeItsStage) {
    PlanRequest r;
    // The planner's shape: 1000 KV bytes per token and layer (f16); 1000 tokens, 8 streams:
    // 8 MB of KV per layer, so 18 MB a layer with its weights.
    r.shape = shape(24, 10 * kMB, 20 * kMB, 20 * kMB, /*kv per token per layer=*/1000);
    r.context_tokens = 1000;
    r.expected_concurrency = 8;
    r.min_gain_per_extra_stage = 1e9;  // only memory may force a split here
    // Each node could hold 13 layers of 18 MB beside the embedding or lm_head (20 + 234 MB).
    r.nodes = {node(1, 260 * kMB, 1e-3), node(2, 260 * kMB, 1e-3)};
    auto same = make_plan(r);
    ASSERT_TRUE(same) << same.error().what();
    ASSERT_EQ(same->stages.size(), 2u);
    for (const PlannedStage& s : same->stages) EXPECT_LE(s.layers.size(), 13);
    // Node 2 keeps f32 KV: 26 MB a layer, at most 9 layers (20 + 234 MB), so node 1 would need
    // 15, more than it holds: no layout fits.
    r.nodes[1].kv_bytes_per_token_per_layer = 2000;
    auto mixed = make_plan(r);
    ASSERT_FALSE(mixed);
    EXPECT_EQ(mixed.error().code, errc::no_fit);
    // With room for 15 layers on node 1 (20 + 270 MB) it fits again, and every stage's memory
    // is counted with its own node's KV bytes.
    r.nodes[0].memory_bytes = 290 * kMB;
    auto fits = make_plan(r);
    ASSERT_TRUE(fits) << fits.error().what();
    ASSERT_EQ(fits->stages.size(), 2u);
    for (const PlannedStage& s : fits->stages) {
        const bool f32_node = s.node == id_of(2);
        const std::uint64_t per_layer = 10 * kMB + (f32_node ? 16 : 8) * kMB;
        const std::uint64_t layers = static_cast<std::uint64_t>(s.layers.size());
        EXPECT_EQ(s.memory_bytes, layers * per_layer + 20 * kMB) << s.node.short_string();
        EXPECT_LE(s.memory_bytes, f32_node ? 260 * kMB : 290 * kMB);
    }
    // A node that reports no KV bytes (0) is sized with the planner's shape.
    r.nodes[1].kv_bytes_per_token_per_layer = 0;
    r.nodes[0].memory_bytes = 260 * kMB;
    auto unreported = make_plan(r);
    ASSERT_TRUE(unreported) << unreported.error().what();
    ASSERT_EQ(unreported->stages.size(), same->stages.size());
    for (std::size_t i = 0; i < same->stages.size(); ++i) {
        EXPECT_EQ(unreported->stages[i].node, same->stages[i].node);
        EXPECT_EQ(unreported->stages[i].layers, same->stages[i].layers);
        EXPECT_EQ(unreported->stages[i].memory_bytes, same->stages[i].memory_bytes);
    }
}

TEST(Planner, TailMustHoldLmHead) {
    PlanRequest r;
    // Node 1 holds the embedding and all 10 layers (20 + 100 = 120 MB) but not lm_head too.
    r.shape = shape(10, 10 * kMB, 20 * kMB, 50 * kMB);
    r.nodes = {node(1, 125 * kMB, 1e-3), node(2, 70 * kMB, 1e-3)};
    auto plan = make_plan(r);
    ASSERT_TRUE(plan) << plan.error().what();
    ASSERT_EQ(plan->stages.size(), 2u);
    EXPECT_EQ(plan->stages.back().node, id_of(2));
    EXPECT_EQ(plan->stages.back().memory_bytes, 2 * 10 * kMB + 50 * kMB);
    // Tied embeddings: a tail that is not the head also needs the embedding.
    r.tied_embeddings = true;
    r.shape.lm_head_bytes = 0;
    r.nodes = {node(1, 105 * kMB, 1e-3), node(2, 70 * kMB, 1e-3)};
    auto tied = make_plan(r);
    ASSERT_TRUE(tied) << tied.error().what();
    EXPECT_EQ(tied->stages.back().memory_bytes,
              static_cast<std::uint64_t>(tied->stages.back().layers.size()) * 10 * kMB + 20 * kMB);
}

TEST(Planner, NothingFitsIsAClearError) {
    PlanRequest r;
    r.shape = shape(24, 10 * kMB);
    r.nodes = {node(1, 100 * kMB, 1e-3), node(2, 100 * kMB, 1e-3)};
    auto plan = make_plan(r);
    ASSERT_FALSE(plan);
    EXPECT_EQ(plan.error().code, errc::no_fit);
    EXPECT_NE(plan.error().message.find("model needs"), std::string::npos) << plan.error().message;
    EXPECT_NE(plan.error().message.find("offer"), std::string::npos);
    r.nodes.clear();
    EXPECT_EQ(make_plan(r).error().code, errc::no_fit);
}

TEST(Planner, BadInputIsRejected) {
    PlanRequest r;
    r.shape = shape(4, kMB);
    r.nodes = {node(1, 100 * kMB, 1e-3)};
    r.shape.layer_bytes.pop_back();
    EXPECT_EQ(make_plan(r).error().code, errc::invalid_argument);
    r.shape = shape(4, kMB);
    r.nodes = {node(1, 100 * kMB, 0)};
    EXPECT_EQ(make_plan(r).error().code, errc::invalid_argument);
    r.nodes = {node(1, 100 * kMB, 1e-3), node(1, 100 * kMB, 1e-3)};
    EXPECT_EQ(make_plan(r).error().code, errc::invalid_argument);
    r.nodes = {node(1, 100 * kMB, 1e-3)};
    r.nodes[0].kv_bytes_per_token_per_layer = std::uint64_t{1} << 40;  // would overflow the sums
    EXPECT_EQ(make_plan(r).error().code, errc::invalid_argument);
    r.nodes = {node(1, 100 * kMB, 1e-3)};
    r.shape.n_layers = 0;
    EXPECT_EQ(make_plan(r).error().code, errc::invalid_argument);
}

TEST(Planner, DeterministicWhateverTheInputOrder) {
    PlanRequest r;
    r.shape = shape(28, 10 * kMB);
    r.nodes = {node(1, 120 * kMB, 1e-3), node(2, 120 * kMB, 1e-3), node(3, 120 * kMB, 1e-3),
               node(4, 120 * kMB, 1e-3)};
    r.expected_concurrency = 4;
    auto a = make_plan(r);
    ASSERT_TRUE(a);
    std::reverse(r.nodes.begin(), r.nodes.end());
    auto b = make_plan(r);
    ASSERT_TRUE(b);
    ASSERT_EQ(a->stages.size(), b->stages.size());
    for (std::size_t i = 0; i < a->stages.size(); ++i) {
        EXPECT_EQ(a->stages[i].node, b->stages[i].node);
        EXPECT_EQ(a->stages[i].layers, b->stages[i].layers);
    }
    EXPECT_EQ(a->explanation, b->explanation);
}

TEST(Planner, ManyNodesStayFast) {
    PlanRequest r;
    r.shape = shape(80, 10 * kMB);
    for (std::uint8_t i = 1; i <= 16; ++i)
        r.nodes.push_back(node(i, 120 * kMB, 1e-3 * (1 + i % 3)));
    auto plan = make_plan(r);
    ASSERT_TRUE(plan) << plan.error().what();
    EXPECT_GE(plan->stages.size(), 7u);  // 800 MB of layers in 120 MB nodes
}

// 4 layers of 10 MB, embedding and lm_head 20 MB each (untied), 1 kB of KV per token and layer
// (0.5 kB on a node with a half-size cache).
TEST(Planner, PipelineKvPositionsAreTheTightestStagesRoomOverItsKvPerPosition) {
    PlanRequest r;
    r.shape = shape(4, 10 * kMB, 20 * kMB, 20 * kMB, 1000);
    r.nodes = {node(1, 50 * kMB, 0.001), node(2, 100 * kMB, 0.001), node(3, 100 * kMB, 0.001)};
    r.nodes[2].kv_bytes_per_token_per_layer = 500;
    // Head on node 1: 2 layers + embedding = 40 MB, 10 MB left at 2 kB a position.
    // Tail on node 2: 2 layers + lm_head = 40 MB, 60 MB left: 30,000 positions.
    const std::vector<PlannedStage> split = {{id_of(1), {0, 2}}, {id_of(2), {2, 4}}};
    EXPECT_EQ(pipeline_kv_positions(r, split), 5'000u);
    // The tail on node 3 instead, 3 layers at 0.5 kB each: 50 MB left, 33,333 positions; the
    // head still bounds it.
    const std::vector<PlannedStage> other = {{id_of(1), {0, 1}}, {id_of(3), {1, 4}}};
    EXPECT_EQ(pipeline_kv_positions(r, other), (50 - 30) * kMB / 1000);  // head: 1 layer + emb
    // Tied embeddings: the tail that is not the head holds the embedding again.
    r.tied_embeddings = true;
    r.shape.lm_head_bytes = 0;
    EXPECT_EQ(pipeline_kv_positions(r, split), 5'000u);  // node 2: 60 MB left, 30,000
    r.nodes[1].memory_bytes = 45 * kMB;                  // node 2: 5 MB left at 2 kB: 2,500
    EXPECT_EQ(pipeline_kv_positions(r, split), 2'500u);
    // No room at all is a bound of 1 (nothing fits), not 0 (no bound).
    r.nodes[1].memory_bytes = 30 * kMB;
    EXPECT_EQ(pipeline_kv_positions(r, split), 1u);
    // A stage on a node without a capacity, or one that offers nothing: no bound is known.
    const std::vector<PlannedStage> stranger = {{id_of(1), {0, 2}}, {id_of(9), {2, 4}}};
    EXPECT_EQ(pipeline_kv_positions(r, stranger), 0u);
    r.nodes[0].memory_bytes = 0;
    EXPECT_EQ(pipeline_kv_positions(r, split), 0u);
}

TEST(ParseSize, UnitsAndErrors) {
    EXPECT_EQ(*parse_size("6MB"), 6000000u);
    EXPECT_EQ(*parse_size("24GB"), 24000000000u);
    EXPECT_EQ(*parse_size("512MiB"), 512u << 20);
    EXPECT_EQ(*parse_size("1.5G"), 1610612736u);
    EXPECT_EQ(*parse_size("1048576"), 1048576u);
    EXPECT_EQ(*parse_size("64 kb"), 64000u);
    EXPECT_EQ(*parse_size("2TiB"), 2ull << 40);
    EXPECT_FALSE(parse_size(""));
    EXPECT_FALSE(parse_size("GB"));
    EXPECT_FALSE(parse_size("5XB"));
    EXPECT_FALSE(parse_size("1e30GB"));
    EXPECT_EQ(format_size(512u << 20), "512.0 MiB");
    EXPECT_EQ(format_size(100), "100 B");
}

}  // namespace
}  // namespace brigade::mesh
