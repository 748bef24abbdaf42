#include "node/mesh_status.hpp"

#include <algorithm>

#include "node/mesh_runtime_impl.hpp"

namespace brigade::node {

nlohmann::json mesh_status_json(const MeshStatusInput& input) {
    using nlohmann::json;
    json out;
    out["mesh_id"] = input.mesh_id.to_string();
    out["self"] = input.self.to_string();
    out["coordinator"] = input.coordinator.to_string();
    out["epoch"] = input.plan ? input.plan->epoch : 0;
    out["model"] = input.model;
    std::vector<const MeshStatusNode*> nodes;
    for (const MeshStatusNode& n : input.nodes) nodes.push_back(&n);
    std::sort(nodes.begin(), nodes.end(), [](auto* a, auto* b) { return a->id < b->id; });

    json node_list = json::array();
    json links = json::array();
    for (const MeshStatusNode* n : nodes) {
        json addresses = json::array();
        for (const mesh::PeerAddress& a : n->addresses) addresses.push_back(a.to_string());
        json entry = {{"id", n->id.to_string()},
                      {"addresses", addresses},
                      {"state", n->suspect ? "suspect" : "alive"},
                      {"memory_bytes", n->capacity ? n->capacity->memory_bytes : 0},
                      {"backend", n->capacity ? n->capacity->backend : ""},
                      {"seconds_per_layer", n->capacity ? n->capacity->seconds_per_layer : 0.0},
                      {"kv_bytes_per_token_per_layer",
                       n->capacity ? n->capacity->kv_bytes_per_token_per_layer : 0},
                      {"is_self", n->id == input.self}};
        node_list.push_back(std::move(entry));
        if (!n->capacity) continue;
        std::vector<mesh::LinkMeasurement> measured = n->capacity->links;
        std::sort(measured.begin(), measured.end(),
                  [](const auto& a, const auto& b) { return a.peer < b.peer; });
        for (const mesh::LinkMeasurement& l : measured) {
            links.push_back({{"from", n->id.to_string()},
                             {"to", l.peer.to_string()},
                             {"rtt_ms", l.rtt_us == 0 ? json(nullptr) : json(l.rtt_us / 1000.0)},
                             {"bandwidth_bytes_per_s", l.bandwidth_bytes_per_s}});
        }
    }
    out["nodes"] = std::move(node_list);

    if (!input.plan) {
        out["plan"] = nullptr;
    } else {
        json stages = json::array();
        for (const mesh::StageAssignment& s : input.plan->stages) {
            mesh::StageStats stats;
            for (const MeshStatusNode* n : nodes) {
                if (n->id == s.node && n->capacity &&
                    n->capacity->stage.epoch == input.plan->epoch) {
                    stats = n->capacity->stage;
                }
            }
            stages.push_back({{"node", s.node.to_string()},
                              {"first_layer", s.first_layer},
                              {"last_layer", s.last_layer},
                              {"steps", stats.steps},
                              {"tokens", stats.tokens},
                              {"mean_step_ms", stats.mean_step_us / 1000.0}});
        }
        out["plan"] = {{"epoch", input.plan->epoch},
                       {"predicted_tok_s", input.plan->predicted_tok_s},
                       {"stages", std::move(stages)}};
    }
    out["links"] = std::move(links);
    out["unavailable"] = input.unavailable ? json(*input.unavailable) : json(nullptr);
    out["planning"] = {{"context_tokens", input.context_tokens},
                       {"expected_concurrency", input.expected_concurrency},
                       {"activation_bytes", input.activation_bytes}};
    return out;
}

nlohmann::json MeshRuntime::Impl::status_on_io() const {
    MeshStatusInput in;
    in.mesh_id = credentials.id;
    in.self = key.id();
    in.coordinator = agreement.coordinator();
    in.model = options.model_id;
    const mesh::PlanRequest planned = plan_request();
    in.context_tokens = planned.context_tokens;
    in.expected_concurrency = planned.expected_concurrency;
    in.activation_bytes = planned.activation_bytes;
    for (const mesh::NodeId& id : membership.member_ids()) {
        MeshStatusNode n;
        n.id = id;
        if (id == key.id()) {
            std::lock_guard lock(const_cast<std::mutex&>(addresses_mutex));
            n.addresses = addresses;
            n.capacity = membership.self_capacity();
            if (n.capacity && host != nullptr) n.capacity->stage = host->stage_stats();
        } else if (const mesh::Member* m = membership.find(id)) {
            n.suspect = m->state == mesh::MemberState::kSuspect;
            n.capacity = m->capacity;
            for (const mesh::PeerInfo& p : directory.peer_list({}).peers) {
                if (p.id == id) n.addresses = p.addresses;
            }
        }
        in.nodes.push_back(std::move(n));
    }
    if (agreement.active()) in.plan = agreement.active();
    if (!active_built || !agreement.active()) {
        in.unavailable = unavailable.empty() ? std::string("no plan yet") : unavailable;
    }
    return mesh_status_json(in);
}

}  // namespace brigade::node
