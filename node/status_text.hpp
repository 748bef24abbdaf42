#pragma once
// The node's state for people, from the JSON that GET /v1/mesh and GET /health answer: what
// `brigade status` prints and the status page at GET / shows. Tolerates absent or differently
// typed fields (a node of another version reports less or more).

#include <nlohmann/json.hpp>
#include <string>

namespace brigade::node {

// Nodes with their state, memory, backend and speed; the committed plan's stages with their
// layers and timings; the links' round-trip times.
std::string format_status(const nlohmann::json& mesh);

// "requests at this node: ..." from GET /health's body, or "" where the node reports none.
std::string format_load(const nlohmann::json& health);

}  // namespace brigade::node
