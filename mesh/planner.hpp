#pragma once
// The layer-split planner: a pure, deterministic function (no I/O, no clocks, no randomness).
//
// Cost model (all predictions are for decoding, which is what users feel):
// - Stage i with n_i layers on a node with `seconds_per_layer` s_i takes, for a micro-batch of b
//   tokens, t_i(b) = n_i * s_i * (1 + batch_token_cost * (b - 1)). Decoding is memory-bound, so
//   an extra sequence in a batch costs a fraction of the first (batch_token_cost, default 0.1).
// - A hop between consecutive stages costs rtt/2 + bytes/bandwidth for the activations
//   (b * hidden * activation_bytes); the tail sends the sampled token back to the head (rtt/2).
// - With C concurrent streams and k stages the pipeline holds m = min(k, C) micro-batches of
//   b = ceil(C / m) sequences. One decode step of every stream takes the period
//       P = max(cycle, m * max_i t_i(b)),  cycle = sum_i t_i(b) + hops(b),
//   because each micro-batch must go round the whole loop and the slowest stage serves all m
//   micro-batches. Aggregate throughput = C / P tok/s; each stream gets 1 / P.
// - The tail also runs the lm_head (the embedding when tied): it is charged lm_head bytes /
//   average layer bytes extra layers of time.
// - Memory of a stage: its layers' bytes + KV (kv_bytes_per_token_per_layer * n_i * context *
//   C, with the node's own KV bytes per token where it reports them) + the embedding on the head +
//   lm_head on the tail (+ the embedding again on a tail that is not the head when embeddings are
//   tied).
//
// Search: nodes are ranked fastest first (ties: lower node id). For every subset of nodes (all
// subsets up to 8 nodes, prefixes of the speed and memory rankings beyond), in rank order and
// with its fastest node moved to the tail, and every bound tau on a stage's time, layers are handed
// out greedily front to back: each stage takes as many layers as its memory and tau allow. The best
// plan per stage count is kept; a plan with more stages replaces one with fewer only when it raises
// predicted throughput by more than `min_gain_per_extra_stage`, so a split is never chosen when it
// is predicted to be slower than fewer stages (in particular than one node that can hold the
// model).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mesh/errors.hpp"
#include "mesh/identity.hpp"
#include "model/types.hpp"

namespace brigade::mesh {

struct NodeCapacity {
    NodeId id;
    std::uint64_t memory_bytes = 0;  // offered for weights + KV
    double seconds_per_layer = 0;    // decode, one token, this model
    std::string backend;
    // This node's KV bytes per token and layer (its cache's element type); 0: the shape's.
    std::uint64_t kv_bytes_per_token_per_layer = 0;
};

struct LinkCost {
    NodeId a;
    NodeId b;  // symmetric: (a, b) also describes (b, a)
    double rtt_s = 0;
    double bandwidth_bytes_per_s = 0;  // 0: use the default
};

struct PlanRequest {
    model::ModelShape shape;
    std::vector<NodeCapacity> nodes;
    std::vector<LinkCost> links;
    int expected_concurrency = 1;                  // concurrent streams to size KV and batching for
    int context_tokens = 4096;                     // KV is reserved for this many tokens per stream
    std::size_t activation_bytes = 2;              // BF16 hidden states on the wire
    bool tied_embeddings = false;                  // the tail needs the embedding as lm_head
    double default_rtt_s = 0.0005;                 // unmeasured links: 0.5 ms (LAN)
    double default_bandwidth_bytes_per_s = 100e6;  // unmeasured links: ~1 Gbit/s
    double batch_token_cost = 0.1;
    double min_gain_per_extra_stage = 0.05;
};

struct PlannedStage {
    NodeId node;
    model::LayerRange layers;
    std::uint64_t memory_bytes = 0;  // weights + KV + embedding/lm_head as charged
    double step_s = 0;               // t_i(1): time of one token through this stage
    double tok_s = 0;                // 1 / step_s: the stage's own decode rate
};

struct Plan {
    std::uint64_t epoch = 0;  // set by the coordinator, not the planner
    std::vector<PlannedStage> stages;
    double single_stream_tok_s = 0;  // one request alone: 1 / (sum of steps + hops)
    double stream_tok_s = 0;         // each stream at the expected concurrency: 1 / P
    double aggregate_tok_s = 0;      // all streams at the expected concurrency: C / P
    double hop_s = 0;                // hop latency per token (one stream)
    std::string explanation;         // one line per decision, for `brigade plan`
};

Result<Plan> make_plan(const PlanRequest& request);

// What a live mesh should charge its unmeasured links (PlanRequest::default_rtt_s): the median
// of the measured RTTs, or `fallback_s` when none is measured. Links come up one after another,
// so early plans see some measured and some not; charging the new ones a constant (0.5 ms) while
// the others read 0.05 ms would make the planner route around the newest links for no reason.
double median_measured_rtt_s(const std::vector<LinkCost>& links, double fallback_s);

// Bytes a stage holding `layers` needs (the same accounting make_plan uses).
std::uint64_t stage_memory_bytes(const PlanRequest& request, model::LayerRange layers, bool is_head,
                                 bool is_tail);

// KV positions that every stage of a pipeline holds beside its weights: the fewest over
// `stages` of (the node's memory − the stage's weights, as make_plan charges them) / (the
// node's KV bytes per position of its layers). Every stage keeps every running sequence's
// positions, so a head that keeps its sequences within this many positions in all keeps every
// stage within its memory. 0 when a stage's node is not among `request.nodes` or offered no
// memory (no bound is known).
std::uint64_t pipeline_kv_positions(const PlanRequest& request,
                                    std::span<const PlannedStage> stages);

// "6MB", "24GB", "512MiB", "1.5G", "1048576": decimal units (kB/MB/GB/TB = 10^3k), binary units
// with "i" (KiB/MiB/GiB/TiB = 2^10k); a bare K/M/G/T means the binary unit.
Result<std::uint64_t> parse_size(std::string_view text);
std::string format_size(std::uint64_t bytes);

}  // namespace brigade::mesh
