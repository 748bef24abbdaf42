#include "node/status_text.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

namespace brigade::node {
namespace {

using nlohmann::json;

// Field access that tolerates absent or differently typed fields: a status printer must not
// die on a node that reports less than we expect.
std::string text_of(const json& j, const char* key, const std::string& fallback = "-") {
    if (!j.is_object() || !j.contains(key)) return fallback;
    const auto& v = j[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return fallback;
    return v.dump();
}

std::optional<double> number_of(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<double>();
}

std::string fixed(std::optional<double> v, int decimals, const char* unit = "") {
    if (!v) return "-";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f%s", decimals, *v, unit);
    return buf;
}

std::string bytes_text(std::optional<double> bytes) {
    if (!bytes) return "-";
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    double v = *bytes;
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

// Node ids are long; the shortest prefix (at least 8 characters) that tells them apart.
class ShortIds {
public:
    explicit ShortIds(std::vector<std::string> ids) {
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        std::size_t len = 8;
        auto unique = [&](std::size_t n) {
            std::map<std::string, int> seen;
            for (const auto& id : ids) {
                if (++seen[id.substr(0, n)] > 1) return false;
            }
            return true;
        };
        std::size_t longest = 0;
        for (const auto& id : ids) longest = std::max(longest, id.size());
        while (len < longest && !unique(len)) ++len;
        len_ = len;
    }
    std::string operator()(const std::string& id) const { return id.substr(0, len_); }

private:
    std::size_t len_ = 8;
};

// A table with left-aligned columns, two spaces apart.
class Table {
public:
    explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    std::string render(const std::string& indent) const {
        std::vector<std::size_t> width;
        for (const auto& r : rows_) {
            for (std::size_t i = 0; i < r.size(); ++i) {
                if (width.size() <= i) width.push_back(0);
                width[i] = std::max(width[i], r[i].size());
            }
        }
        std::string out;
        for (const auto& r : rows_) {
            std::string line = indent;
            for (std::size_t i = 0; i < r.size(); ++i) {
                line += r[i];
                if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
            }
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out += line + "\n";
        }
        return out;
    }

private:
    std::vector<std::vector<std::string>> rows_;
};

std::string join_addresses(const json& node) {
    if (!node.contains("addresses") || !node["addresses"].is_array()) return "-";
    std::string out;
    for (const auto& a : node["addresses"]) {
        if (!out.empty()) out += ",";
        out += a.is_string() ? a.get<std::string>() : a.dump();
    }
    return out.empty() ? "-" : out;
}

}  // namespace

std::string format_load(const json& health) {
    if (!health.is_object() || !health.contains("requests")) return "";
    std::string out =
        "requests at this node: " + fixed(number_of(health["requests"], "in_flight"), 0) +
        " in flight";
    if (health.contains("head")) {
        const json& head = health["head"];
        out += "; as the pipeline head: " + fixed(number_of(head, "running"), 0) + " running, " +
               fixed(number_of(head, "queued"), 0) + " queued";
        if (const auto positions = number_of(head, "kv_positions"); positions && *positions > 0) {
            out += ", KV for " + fixed(positions, 0) + " positions";
        }
        if (const auto paused = number_of(head, "paused_for_kv"); paused && *paused > 0) {
            out += ", " + fixed(paused, 0) + " paused for KV room so far";
        }
    }
    return out + "\n";
}

std::string format_status(const json& mesh) {
    const json nodes =
        mesh.contains("nodes") && mesh["nodes"].is_array() ? mesh["nodes"] : json::array();
    const json links =
        mesh.contains("links") && mesh["links"].is_array() ? mesh["links"] : json::array();
    const json plan = mesh.contains("plan") ? mesh["plan"] : json();
    std::vector<std::string> ids;
    for (const auto& n : nodes) ids.push_back(text_of(n, "id", ""));
    for (const auto& key : {"self", "coordinator"}) ids.push_back(text_of(mesh, key, ""));
    const ShortIds short_id(ids);
    auto sid = [&](const json& j, const char* key) {
        const auto id = text_of(j, key, "");
        return id.empty() ? std::string("-") : short_id(id);
    };

    std::string out;
    out += "mesh " + text_of(mesh, "mesh_id") + "  epoch " + text_of(mesh, "epoch") + "  model " +
           text_of(mesh, "model") + "\n";
    out += "this node " + sid(mesh, "self") + "  coordinator " + sid(mesh, "coordinator") + "\n";

    out += "\nnodes (" + std::to_string(nodes.size()) + "):\n";
    Table node_table({"", "NODE", "STATE", "MEMORY", "BACKEND", "MS/LAYER", "ADDRESSES"});
    for (const auto& n : nodes) {
        const bool is_self =
            n.contains("is_self") && n["is_self"].is_boolean() && n["is_self"].get<bool>();
        const auto spl = number_of(n, "seconds_per_layer");
        node_table.add({is_self ? "*" : "", sid(n, "id"), text_of(n, "state"),
                        bytes_text(number_of(n, "memory_bytes")), text_of(n, "backend"),
                        spl ? fixed(*spl * 1000.0, 3) : "-", join_addresses(n)});
    }
    out += node_table.render("  ");

    if (mesh.contains("unavailable") && mesh["unavailable"].is_string()) {
        out += "requests get 503: " + mesh["unavailable"].get<std::string>() + "\n";
    }
    if (!plan.is_object()) {
        out += "\nplan: none yet\n";
    } else {
        const json stages =
            plan.contains("stages") && plan["stages"].is_array() ? plan["stages"] : json::array();
        out += "\nplan (epoch " + text_of(plan, "epoch") + ", " + std::to_string(stages.size()) +
               (stages.size() == 1 ? " stage" : " stages") + ", predicted " +
               fixed(number_of(plan, "predicted_tok_s"), 1, " tok/s") + "):\n";
        Table stage_table({"STAGE", "NODE", "LAYERS", "STEPS", "TOKENS", "MEAN STEP"});
        for (std::size_t i = 0; i < stages.size(); ++i) {
            const auto& s = stages[i];
            const auto first = number_of(s, "first_layer");
            const auto last = number_of(s, "last_layer");
            // Ranges are half-open [first, last): print the layers as people count them.
            std::string layers = "-";
            if (first && last) {
                layers = fixed(*first, 0) + "-" + fixed(*last - 1, 0) + " (" +
                         fixed(*last - *first, 0) + ")";
            }
            stage_table.add({std::to_string(i), sid(s, "node"), layers,
                             fixed(number_of(s, "steps"), 0), fixed(number_of(s, "tokens"), 0),
                             fixed(number_of(s, "mean_step_ms"), 2, " ms")});
        }
        out += stage_table.render("  ");
    }

    out += "\nlinks (" + std::to_string(links.size()) + "):\n";
    if (links.empty()) out += "  none\n";
    Table link_table({"FROM", "TO", "RTT"});
    for (const auto& l : links) {
        link_table.add({sid(l, "from"), sid(l, "to"), fixed(number_of(l, "rtt_ms"), 3, " ms")});
    }
    if (!links.empty()) out += link_table.render("  ");
    return out;
}

}  // namespace brigade::node
