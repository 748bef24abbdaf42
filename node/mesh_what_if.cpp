#include "node/mesh_what_if.hpp"

#include <algorithm>
#include <optional>

namespace brigade::node {
namespace {

model::Error bad(const std::string& why) {
    return model::Error{model::errc::invalid_argument, "/v1/mesh: " + why};
}

bool number(const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_number();
}

// A count in [1, limit] at `key`, else nullopt (absent, not an integer, out of range).
std::optional<std::int64_t> count(const nlohmann::json& j, const char* key, std::int64_t limit) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return std::nullopt;
    const auto v = j[key].get<std::int64_t>();
    if (v < 1 || v > limit) return std::nullopt;
    return v;
}

}  // namespace

std::string MeshWhatIf::name_of(const mesh::NodeId& id) const {
    for (const auto& [node, name] : names) {
        if (node == id) return name;
    }
    return id.short_string();
}

model::Result<MeshWhatIf> what_if_from_mesh(const nlohmann::json& mesh,
                                            const ModelShapeInfo& model) {
    if (!mesh.is_object() || !mesh.contains("nodes") || !mesh["nodes"].is_array()) {
        return bad("no \"nodes\" list");
    }
    MeshWhatIf out;
    mesh::PlanRequest& r = out.request;
    r.shape = model.shape;
    r.tied_embeddings = model.tied_embeddings;
    if (mesh.contains("planning") && mesh["planning"].is_object()) {
        const auto& p = mesh["planning"];
        if (auto v = count(p, "context_tokens", 1 << 24)) r.context_tokens = static_cast<int>(*v);
        if (auto v = count(p, "expected_concurrency", 1 << 16)) {
            r.expected_concurrency = static_cast<int>(*v);
        }
        if (auto v = count(p, "activation_bytes", 8))
            r.activation_bytes = static_cast<std::size_t>(*v);
    }
    for (const auto& n : mesh["nodes"]) {
        if (!n.is_object() || !n.contains("id") || !n["id"].is_string()) {
            return bad("a node without an \"id\"");
        }
        auto id = mesh::NodeId::parse(n["id"].get<std::string>());
        if (!id) return bad("node id '" + n["id"].get<std::string>() + "': " + id.error().message);
        // Suspect members are planned as the coordinator does: only alive ones with a report.
        if (!n.contains("state") || n["state"] != "alive") continue;
        if (!n.contains("memory_bytes") || !n["memory_bytes"].is_number_unsigned() ||
            !number(n, "seconds_per_layer") || !(n["seconds_per_layer"].get<double>() > 0)) {
            continue;  // no capacity report yet
        }
        mesh::NodeCapacity c;
        c.id = *id;
        c.memory_bytes = n["memory_bytes"].get<std::uint64_t>();
        c.seconds_per_layer = n["seconds_per_layer"].get<double>();
        c.backend = n.contains("backend") && n["backend"].is_string()
                        ? n["backend"].get<std::string>()
                        : "cpu";
        if (n.contains("kv_bytes_per_token_per_layer") &&
            n["kv_bytes_per_token_per_layer"].is_number_unsigned()) {
            c.kv_bytes_per_token_per_layer = n["kv_bytes_per_token_per_layer"].get<std::uint64_t>();
        }
        r.nodes.push_back(c);
        out.names.emplace_back(*id, id->short_string());
    }
    if (mesh.contains("links") && mesh["links"].is_array()) {
        for (const auto& l : mesh["links"]) {
            if (!l.is_object() || !l.contains("from") || !l.contains("to") ||
                !l["from"].is_string() || !l["to"].is_string() || !number(l, "rtt_ms")) {
                continue;  // not measured yet
            }
            auto from = mesh::NodeId::parse(l["from"].get<std::string>());
            auto to = mesh::NodeId::parse(l["to"].get<std::string>());
            if (!from || !to) return bad("a link between unreadable node ids");
            const double bandwidth =
                number(l, "bandwidth_bytes_per_s") ? l["bandwidth_bytes_per_s"].get<double>() : 0.0;
            r.links.push_back({*from, *to, l["rtt_ms"].get<double>() / 1000.0, bandwidth});
        }
    }
    // As the mesh's coordinator charges its unmeasured links.
    r.default_rtt_s = mesh::median_measured_rtt_s(r.links, r.default_rtt_s);
    return out;
}

std::vector<CommittedStage> committed_stages_from_mesh(const nlohmann::json& mesh) {
    std::vector<CommittedStage> out;
    if (!mesh.is_object() || !mesh.contains("plan") || !mesh["plan"].is_object() ||
        !mesh["plan"].contains("stages") || !mesh["plan"]["stages"].is_array()) {
        return out;
    }
    for (const auto& s : mesh["plan"]["stages"]) {
        if (!s.is_object() || !s.contains("node") || !s["node"].is_string() ||
            !s.contains("first_layer") || !s["first_layer"].is_number_integer() ||
            !s.contains("last_layer") || !s["last_layer"].is_number_integer()) {
            continue;
        }
        const std::string text = s["node"].get<std::string>();
        auto id = mesh::NodeId::parse(text);
        out.push_back({id ? *id : mesh::NodeId{},
                       id ? id->short_string() : text,
                       {s["first_layer"].get<int>(), s["last_layer"].get<int>()}});
    }
    return out;
}

model::Result<void> remove_node(MeshWhatIf& what_if, std::string_view prefix) {
    if (prefix.size() < 4) {
        return model::Error{model::errc::invalid_argument,
                            "--remove-node '" + std::string(prefix) +
                                "': give at least 4 characters of the node id"};
    }
    std::vector<mesh::NodeId> matches;
    for (const auto& n : what_if.request.nodes) {
        if (n.id.to_string().rfind(prefix, 0) == 0) matches.push_back(n.id);
    }
    if (matches.size() != 1) {
        return model::Error{model::errc::invalid_argument,
                            "--remove-node '" + std::string(prefix) + "' matches " +
                                std::to_string(matches.size()) +
                                " of the mesh's planned nodes (`brigade status` lists them)"};
    }
    const mesh::NodeId gone = matches.front();
    auto& r = what_if.request;
    std::erase_if(r.nodes, [&](const mesh::NodeCapacity& n) { return n.id == gone; });
    std::erase_if(r.links, [&](const mesh::LinkCost& l) { return l.a == gone || l.b == gone; });
    return {};
}

void add_node(MeshWhatIf& what_if, const std::string& name, std::uint64_t memory_bytes,
              double seconds_per_layer, double rtt_ms) {
    // An id no real node has (real ids hash a public key): a counter in the last bytes.
    mesh::NodeId id;
    id.bytes.fill(0xff);
    id.bytes.back() = static_cast<std::uint8_t>(what_if.names.size());
    id.bytes[id.bytes.size() - 2] = static_cast<std::uint8_t>(what_if.names.size() >> 8);
    auto& r = what_if.request;
    if (rtt_ms >= 0) {
        for (const auto& n : r.nodes) r.links.push_back({n.id, id, rtt_ms / 1000.0, 0});
    }
    r.nodes.push_back({id, memory_bytes, seconds_per_layer, "cpu"});
    what_if.names.emplace_back(id, name);
}

}  // namespace brigade::node
