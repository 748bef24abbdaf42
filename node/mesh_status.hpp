#pragma once
// The JSON of GET /v1/mesh (api/README.md "GET /v1/mesh"): the same document on every node of a
// mesh, apart from "self" and "is_self". Built from a plain snapshot so it is unit-testable.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mesh/identity.hpp"
#include "mesh/messages.hpp"

namespace brigade::node {

struct MeshStatusNode {
    mesh::NodeId id;
    std::vector<mesh::PeerAddress> addresses;
    bool suspect = false;
    std::optional<mesh::CapacityReport> capacity;  // absent until its first report
};

struct MeshStatusInput {
    mesh::MeshId mesh_id;
    mesh::NodeId self;
    mesh::NodeId coordinator;
    std::string model;
    std::vector<MeshStatusNode> nodes;       // self included
    std::optional<mesh::PlanPropose> plan;   // the active (committed) plan
    std::optional<std::string> unavailable;  // why no pipeline serves, while none does
    // What this node plans for ("planning" in the JSON), so that `brigade plan --url` can
    // predict the plan the mesh makes from the same inputs.
    int context_tokens = 0;
    int expected_concurrency = 1;
    std::size_t activation_bytes = 2;
};

// Links are taken from every node's capacity report (its measured RTT to each peer), so every
// node lists the same links; stage timings from the stage nodes' reports for the plan's epoch.
nlohmann::json mesh_status_json(const MeshStatusInput& input);

}  // namespace brigade::node
