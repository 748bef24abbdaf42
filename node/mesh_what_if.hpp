#pragma once
// `brigade plan --url`: the planner's input for a running mesh, read from its GET /v1/mesh
// document (nodes with their capacity, measured links, what it plans for), so that the plan
// the mesh would make, and what adding or removing a node would change, can be predicted
// from the same deterministic planner (mesh::make_plan) the coordinator runs.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/planner.hpp"
#include "model/errors.hpp"
#include "node/model_shape.hpp"

namespace brigade::node {

struct MeshWhatIf {
    mesh::PlanRequest request;
    // A name per node of the request, as people see it: a mesh node's id as `brigade status`
    // shortens it (8 characters), a hypothetical node's given name.
    std::vector<std::pair<mesh::NodeId, std::string>> names;

    std::string name_of(const mesh::NodeId& id) const;
};

// The mesh's alive nodes that reported a capacity, its links (RTT and bandwidth where
// measured) and its "planning" figures, with the shape of the model's files. Errors name what
// the document lacks.
model::Result<MeshWhatIf> what_if_from_mesh(const nlohmann::json& mesh,
                                            const ModelShapeInfo& model);

// One stage of the plan a mesh committed, with its node named as MeshWhatIf names it.
struct CommittedStage {
    mesh::NodeId id;   // zero where the document's id does not parse
    std::string node;  // the id shortened, or the document's text
    model::LayerRange layers;
};

// The committed plan's stages from a /v1/mesh document; empty when there is none. Stages of
// another shape (a node of another version) are left out.
std::vector<CommittedStage> committed_stages_from_mesh(const nlohmann::json& mesh);

// Takes out the one node whose id starts with `prefix` (at least 4 characters), with its links.
model::Result<void> remove_node(MeshWhatIf& what_if, std::string_view prefix);

// Adds a hypothetical node `name` (memory, seconds per layer, KV bytes of the model's shape)
// whose round trip to every other node is `rtt_ms` (negative: the planner's default).
void add_node(MeshWhatIf& what_if, const std::string& name, std::uint64_t memory_bytes,
              double seconds_per_layer, double rtt_ms);

}  // namespace brigade::node
