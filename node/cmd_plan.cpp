// `brigade plan`: the what-if layer split for this node plus hypothetical ones (issue 6), or,
// with --url, for a running mesh as its GET /v1/mesh shows it, with nodes added or taken out.
// Pure prediction with mesh::make_plan; nothing is loaded beyond a quick speed measurement.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mesh/planner.hpp"
#include "node/commands.hpp"
#include "node/http_client.hpp"
#include "node/mesh_what_if.hpp"
#include "node/model_ref.hpp"
#include "node/model_shape.hpp"

namespace brigade::node {
namespace {

struct PlanNode {
    std::string name;
    std::uint64_t memory_bytes = 0;
    double seconds_per_layer = 0;
    std::optional<double> rtt_ms;  // round trip to the other nodes; nullopt = planner default
};

struct PlanOptions {
    std::string model_ref;
    std::string memory;
    std::optional<double> speed;
    std::vector<std::string> add_nodes;
    std::vector<std::string> remove_nodes;  // --url: id prefixes of the mesh's nodes
    std::string url;                        // a node of a running mesh
    std::string api_key;
    double timeout_s = 10;
    std::optional<int> concurrency_given;
    std::optional<int> ctx_given;
    int concurrency = 1;
    int ctx = 4096;
    bool kv_f32 = false;  // nodes keep their KV cache in f32 (serve --kv-f32)
    bool json = false;
};

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<std::uint64_t> available_memory_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::uint64_t kb = 0;
    std::string unit;
    while (in >> key >> kb) {
        std::getline(in, unit);
        if (key == "MemAvailable:") return kb * 1024;
    }
    return std::nullopt;
}

bool parse_double(const std::string& text, double& out) {
    try {
        std::size_t used = 0;
        out = std::stod(text, &used);
        return used == text.size();
    } catch (const std::exception&) {
        return false;
    }
}

// "mem=SIZE,speed=S[,name=N][,rtt=MS]"; errors name the spec and the bad field.
std::optional<PlanNode> parse_add_node(const std::string& spec, int index, std::string& error) {
    PlanNode node;
    node.name = "node" + std::to_string(index);
    bool have_mem = false;
    bool have_speed = false;
    std::stringstream fields(spec);
    std::string field;
    while (std::getline(fields, field, ',')) {
        const auto eq = field.find('=');
        if (eq == std::string::npos) {
            error = "--add-node '" + spec + "': expected key=value, got '" + field + "'";
            return std::nullopt;
        }
        const auto key = field.substr(0, eq);
        const auto value = field.substr(eq + 1);
        if (key == "mem") {
            auto size = mesh::parse_size(value);
            if (!size) {
                error = "--add-node '" + spec + "': mem: " + size.error().message;
                return std::nullopt;
            }
            node.memory_bytes = *size;
            have_mem = true;
        } else if (key == "speed") {
            if (!parse_double(value, node.seconds_per_layer) || !(node.seconds_per_layer > 0)) {
                error = "--add-node '" + spec + "': speed must be seconds per layer > 0, got '" +
                        value + "'";
                return std::nullopt;
            }
            have_speed = true;
        } else if (key == "name") {
            if (value.empty()) {
                error = "--add-node '" + spec + "': empty name";
                return std::nullopt;
            }
            node.name = value;
        } else if (key == "rtt") {
            double ms = 0;
            if (!parse_double(value, ms) || ms < 0) {
                error =
                    "--add-node '" + spec + "': rtt must be milliseconds >= 0, got '" + value + "'";
                return std::nullopt;
            }
            node.rtt_ms = ms;
        } else {
            error = "--add-node '" + spec + "': unknown key '" + key +
                    "' (known: mem, speed, name, rtt)";
            return std::nullopt;
        }
    }
    if (!have_mem || !have_speed) {
        error = "--add-node '" + spec + "': mem= and speed= are required";
        return std::nullopt;
    }
    return node;
}

// Planner node ids are synthetic: index i+1 in the first bytes, so ties keep the given order and
// the short ids in planner messages differ per node (node i+1 in the order listed by `plan`).
mesh::NodeId synthetic_id(std::size_t index) {
    mesh::NodeId id;
    id.bytes[0] = static_cast<std::uint8_t>((index + 1) >> 8);
    id.bytes[1] = static_cast<std::uint8_t>(index + 1);
    return id;
}

mesh::PlanRequest make_request(const ModelShapeInfo& info, const std::vector<PlanNode>& nodes,
                               const PlanOptions& options) {
    mesh::PlanRequest request;
    request.shape = info.shape;
    request.tied_embeddings = info.tied_embeddings;
    request.expected_concurrency = options.concurrency;
    request.context_tokens = options.ctx;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        request.nodes.push_back(
            {synthetic_id(i), nodes[i].memory_bytes, nodes[i].seconds_per_layer, "cpu"});
        for (std::size_t j = 0; j < i; ++j) {
            if (!nodes[i].rtt_ms && !nodes[j].rtt_ms) continue;
            const double ms = std::max(nodes[i].rtt_ms.value_or(0), nodes[j].rtt_ms.value_or(0));
            request.links.push_back({synthetic_id(j), synthetic_id(i), ms / 1000.0, 0});
        }
    }
    return request;
}

// The plan as --json prints it; `name_of` names the nodes.
nlohmann::json plan_json(const mesh::Plan& plan,
                         const std::function<std::string(const mesh::NodeId&)>& name_of) {
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& s : plan.stages) {
        stages.push_back({{"node", name_of(s.node)},
                          {"first_layer", s.layers.first},
                          {"last_layer", s.layers.last},
                          {"memory_bytes", s.memory_bytes},
                          {"step_s", s.step_s},
                          {"tok_s", s.tok_s}});
    }
    return {{"stages", stages},
            {"single_stream_tok_s", plan.single_stream_tok_s},
            {"stream_tok_s", plan.stream_tok_s},
            {"aggregate_tok_s", plan.aggregate_tok_s},
            {"hop_s", plan.hop_s}};
}

// The stages of a plan, one line each, and its predicted speed; `name_of` names the nodes.
void print_stages(const mesh::Plan& plan,
                  const std::function<std::string(const mesh::NodeId&)>& name_of, int concurrency) {
    for (std::size_t i = 0; i < plan.stages.size(); ++i) {
        const auto& s = plan.stages[i];
        std::printf("  stage %zu  %-12s layers [%d, %d)  %10s  %8.1f tok/s\n", i,
                    name_of(s.node).c_str(), s.layers.first, s.layers.last,
                    mesh::format_size(s.memory_bytes).c_str(), s.tok_s);
    }
    std::printf("predicted decode: %.1f tok/s for one stream alone", plan.single_stream_tok_s);
    if (concurrency > 1) {
        std::printf("; at %d streams %.1f tok/s each, %.1f tok/s in all", concurrency,
                    plan.stream_tok_s, plan.aggregate_tok_s);
    }
    std::printf("\n");
}

// --url: the mesh's committed plan, then the planner's plan for the mesh with the changes asked
// for (none: the plan its coordinator would make now).
int run_plan_for_mesh(const PlanOptions& options, const ModelShapeInfo& info,
                      const std::filesystem::path& model_dir) {
    const char* const me = "brigade plan";
    auto fail = [me](const std::string& why) {
        std::fprintf(stderr, "%s: %s\n", me, why.c_str());
        return 1;
    };
    if (!options.memory.empty() || options.speed) {
        return fail(
            "--memory and --speed describe this machine; with --url the mesh's nodes "
            "are planned (add one with --add-node)");
    }
    auto url = parse_http_url(options.url);
    if (!url) return fail(url.error().message);
    HttpRequest req;
    req.target = url->base_path + "/v1/mesh";
    req.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(options.timeout_s * 1000));
    if (!options.api_key.empty()) {
        req.headers.emplace_back("Authorization", "Bearer " + options.api_key);
    }
    auto resp = http_request(*url, req);
    if (!resp) return fail("cannot reach " + options.url + ": " + resp.error().message);
    const auto mesh = nlohmann::json::parse(resp->body, nullptr, /*allow_exceptions=*/false);
    if (resp->status != 200) {
        return fail(options.url + "/v1/mesh answered " + std::to_string(resp->status) + ": " +
                    resp->body);
    }
    auto what_if = what_if_from_mesh(mesh, info);
    if (!what_if) return fail(what_if.error().message);
    if (options.ctx_given) what_if->request.context_tokens = *options.ctx_given;
    if (options.concurrency_given)
        what_if->request.expected_concurrency = *options.concurrency_given;
    const std::string served =
        mesh.contains("model") && mesh["model"].is_string() ? mesh["model"].get<std::string>() : "";
    // The shape comes from the local files: they must be the mesh's model (ids are directory
    // names, as `brigade serve` names its model).
    std::error_code ec;
    std::filesystem::path canonical = std::filesystem::weakly_canonical(model_dir, ec);
    if (ec) canonical = model_dir;
    const std::string local = canonical.filename().string();
    if (!served.empty() && local != served) {
        return fail("the mesh serves '" + served + "' but the model here is '" + local + "' (" +
                    model_dir.string() + "); give the mesh's model with --model");
    }
    for (const auto& prefix : options.remove_nodes) {
        if (auto removed = remove_node(*what_if, prefix); !removed) {
            return fail(removed.error().message);
        }
    }
    for (std::size_t i = 0; i < options.add_nodes.size(); ++i) {
        std::string error;
        auto node = parse_add_node(options.add_nodes[i], static_cast<int>(i) + 1, error);
        if (!node) return fail(error);
        add_node(*what_if, node->name, node->memory_bytes, node->seconds_per_layer,
                 node->rtt_ms.value_or(-1.0));
    }
    const auto name_of = [&](const mesh::NodeId& id) { return what_if->name_of(id); };
    const auto plan = mesh::make_plan(what_if->request);
    const bool changed = !options.add_nodes.empty() || !options.remove_nodes.empty();

    const std::vector<CommittedStage> committed = committed_stages_from_mesh(mesh);
    bool same_as_committed = plan && plan->stages.size() == committed.size();
    for (std::size_t i = 0; same_as_committed && i < committed.size(); ++i) {
        same_as_committed = plan->stages[i].node == committed[i].id &&
                            plan->stages[i].layers.first == committed[i].layers.first &&
                            plan->stages[i].layers.last == committed[i].layers.last;
    }

    if (options.json) {
        nlohmann::json out;
        out["mesh"] = options.url;
        out["model"] = served;
        nlohmann::json nodes = nlohmann::json::array();
        for (const auto& n : what_if->request.nodes) {
            nodes.push_back({{"name", name_of(n.id)},
                             {"memory_bytes", n.memory_bytes},
                             {"seconds_per_layer", n.seconds_per_layer}});
        }
        out["nodes"] = nodes;
        out["committed"] = mesh.contains("plan") ? mesh["plan"] : nlohmann::json();
        out["fits"] = static_cast<bool>(plan);
        if (plan) {
            out["plan"] = plan_json(*plan, name_of);
        } else {
            out["error"] = plan.error().message;
        }
        out["same_as_committed"] = same_as_committed;
        std::printf("%s\n", out.dump(2).c_str());
        return plan ? 0 : 1;
    }

    std::printf("mesh at %s: model '%s', planned with the shape of %s (%d layers)\n",
                options.url.c_str(), served.c_str(), model_dir.string().c_str(),
                info.shape.n_layers);
    for (const auto& n : what_if->request.nodes) {
        std::printf("node %-12s memory %10s  %.3g s/layer\n", name_of(n.id).c_str(),
                    mesh::format_size(n.memory_bytes).c_str(), n.seconds_per_layer);
    }
    if (committed.empty()) {
        std::printf("committed plan: none\n");
    } else {
        const auto& committed_plan = mesh["plan"];
        const double predicted = committed_plan.contains("predicted_tok_s") &&
                                         committed_plan["predicted_tok_s"].is_number()
                                     ? committed_plan["predicted_tok_s"].get<double>()
                                     : 0.0;
        std::printf("committed plan (epoch %s, predicted %.1f tok/s):\n",
                    committed_plan.value("epoch", nlohmann::json(0)).dump().c_str(), predicted);
        for (std::size_t i = 0; i < committed.size(); ++i) {
            std::printf("  stage %zu  %-12s layers [%d, %d)\n", i, committed[i].node.c_str(),
                        committed[i].layers.first, committed[i].layers.last);
        }
    }
    if (!plan) {
        std::printf("%s: no layout fits: %s\n", changed ? "with the changes" : "the mesh now",
                    plan.error().message.c_str());
        return 1;
    }
    std::printf("%s: %zu stage%s%s\n", changed ? "with the changes" : "the planner now",
                plan->stages.size(), plan->stages.size() == 1 ? "" : "s",
                same_as_committed ? " (the committed plan)" : "");
    print_stages(*plan, name_of, what_if->request.expected_concurrency);
    return 0;
}

int run_plan(const PlanOptions& options) {
    const char* const me = "brigade plan";
    auto model = resolve_model_for_command(options.model_ref, "plan");
    if (!model) {
        std::fprintf(stderr, "%s: %s\n", me, model.error().message.c_str());
        return 1;
    }
    auto info = read_model_shape(model->dir, kv_cache_dtype(options.kv_f32));
    if (!info) {
        std::fprintf(stderr, "%s: %s\n", me, info.error().message.c_str());
        return 1;
    }
    if (!options.url.empty()) return run_plan_for_mesh(options, *info, model->dir);
    if (!options.remove_nodes.empty()) {
        std::fprintf(stderr, "%s: --remove-node takes nodes out of a running mesh (--url)\n", me);
        return 1;
    }

    PlanNode self{"this", 0, 0, std::nullopt};
    if (!options.memory.empty()) {
        auto size = mesh::parse_size(options.memory);
        if (!size) {
            std::fprintf(stderr, "%s: --memory: %s\n", me, size.error().message.c_str());
            return 1;
        }
        self.memory_bytes = *size;
    } else if (auto avail = available_memory_bytes()) {
        self.memory_bytes = *avail;
    } else {
        std::fprintf(stderr, "%s: cannot read MemAvailable from /proc/meminfo; pass --memory\n",
                     me);
        return 1;
    }
    if (options.speed) {
        if (!(*options.speed > 0)) {
            std::fprintf(stderr, "%s: --speed must be > 0 seconds per layer\n", me);
            return 1;
        }
        self.seconds_per_layer = *options.speed;
    } else {
        std::fprintf(stderr, "%s: measuring this machine's decode speed (cpu backend)...\n", me);
        auto measured = measure_seconds_per_layer(model->dir);
        if (!measured) {
            std::fprintf(stderr, "%s: measuring speed: %s (pass --speed)\n", me,
                         measured.error().message.c_str());
            return 1;
        }
        self.seconds_per_layer = *measured;
    }

    std::vector<PlanNode> nodes{self};
    for (std::size_t i = 0; i < options.add_nodes.size(); ++i) {
        std::string error;
        auto node = parse_add_node(options.add_nodes[i], static_cast<int>(i) + 1, error);
        if (!node) {
            std::fprintf(stderr, "%s: %s\n", me, error.c_str());
            return 1;
        }
        nodes.push_back(*node);
    }
    std::map<mesh::NodeId, std::size_t> index_of;
    for (std::size_t i = 0; i < nodes.size(); ++i) index_of[synthetic_id(i)] = i;
    const auto name_of = [&](const mesh::NodeId& id) { return nodes[index_of.at(id)].name; };

    const auto request = make_request(*info, nodes, options);
    auto plan = mesh::make_plan(request);
    // The planner's messages name nodes by short id; ours are synthetic, so show the names.
    const auto named = [&nodes](std::string message) {
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            const auto id = synthetic_id(i).short_string();
            for (auto at = message.find(id); at != std::string::npos; at = message.find(id, at)) {
                message.replace(at, id.size(), nodes[i].name);
                at += nodes[i].name.size();
            }
        }
        return message;
    };
    const auto single_request = make_request(*info, {self}, options);
    auto single = mesh::make_plan(single_request);
    const auto single_need =
        mesh::stage_memory_bytes(single_request, {0, info->shape.n_layers}, true, true);

    if (options.json) {
        nlohmann::json out;
        out["model"] = model->dir.string();
        out["n_layers"] = info->shape.n_layers;
        nlohmann::json jnodes = nlohmann::json::array();
        for (const auto& n : nodes) {
            jnodes.push_back({{"name", n.name},
                              {"memory_bytes", n.memory_bytes},
                              {"seconds_per_layer", n.seconds_per_layer}});
        }
        out["nodes"] = jnodes;
        out["fits"] = static_cast<bool>(plan);
        if (plan) {
            out["plan"] = plan_json(*plan, name_of);
        } else {
            out["error"] = named(plan.error().message);
        }
        out["single_node"] = {{"fits", static_cast<bool>(single)},
                              {"needs_bytes", single_need},
                              {"tok_s", single ? single->single_stream_tok_s : 0.0}};
        std::printf("%s\n", out.dump(2).c_str());
        return plan ? 0 : 1;
    }

    std::printf("model: %s (%d layers)\n", model->dir.string().c_str(), info->shape.n_layers);
    for (const auto& n : nodes) {
        std::printf("node %-12s memory %10s  %.3g s/layer\n", n.name.c_str(),
                    mesh::format_size(n.memory_bytes).c_str(), n.seconds_per_layer);
    }
    if (single) {
        std::printf("this node alone: %.1f tok/s (needs %s)\n", single->single_stream_tok_s,
                    mesh::format_size(single_need).c_str());
    } else {
        std::printf("this node alone: does not fit (needs %s, has %s)\n",
                    mesh::format_size(single_need).c_str(),
                    mesh::format_size(self.memory_bytes).c_str());
    }
    if (!plan) {
        std::fprintf(stderr, "%s: no layout fits: %s\n", me, named(plan.error().message).c_str());
        return 1;
    }
    std::printf("plan: %zu stage%s\n", plan->stages.size(), plan->stages.size() == 1 ? "" : "s");
    print_stages(*plan, name_of, options.concurrency);
    return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, CommandSet& commands) {
    auto options = std::make_shared<PlanOptions>();
    auto* sub = app.add_subcommand(
        "plan", "Predict how a model would be split over this node and hypothetical ones");
    sub->footer(
        "Example: brigade plan --memory 1GB --add-node mem=8GB,speed=0.002,name=laptop,rtt=1\n"
        "         brigade plan --url http://127.0.0.1:8177 --remove-node c6j0aqne\n"
        "Speeds are seconds per layer for one decode token; without --speed this node's is "
        "measured with the cpu backend.");
    sub->add_option("--model", options->model_ref,
                    "Model directory or Hugging Face cache name (default: the demo model)");
    sub->add_option("--memory", options->memory,
                    "Memory this node offers, e.g. 6MB, 24GB, 512MiB (default: MemAvailable)");
    sub->add_option("--speed", options->speed,
                    "Seconds per layer of this node (default: measured)");
    sub->add_option("--add-node", options->add_nodes,
                    "A hypothetical node: mem=SIZE,speed=S[,name=N][,rtt=MS] (repeatable)")
        ->take_all()
        ->allow_extra_args(false);
    sub->add_option("--concurrency", options->concurrency_given,
                    "Expected concurrent streams (default 1; with --url, the mesh's)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--ctx", options->ctx_given,
                    "Context tokens reserved per stream (default 4096; with --url, the mesh's)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--url", options->url,
                    "Plan a running mesh (the node's API, e.g. http://127.0.0.1:8177): its nodes "
                    "as GET /v1/mesh reports them, with --add-node / --remove-node changes");
    sub->add_option("--remove-node", options->remove_nodes,
                    "With --url: take out the mesh node whose id starts with this (repeatable)")
        ->take_all()
        ->allow_extra_args(false);
    sub->add_option("--api-key", options->api_key,
                    "With --url: sent as 'Authorization: Bearer KEY'");
    sub->add_option("--timeout", options->timeout_s,
                    "With --url: seconds to wait for the node's answer (default 10)");
    sub->add_flag("--kv-f32", options->kv_f32,
                  "The nodes keep their KV cache in f32 (serve --kv-f32): twice the KV bytes");
    sub->add_flag("--json", options->json, "Machine-readable output");
    commands.add(sub, [options] {
        if (options->concurrency_given) options->concurrency = *options->concurrency_given;
        if (options->ctx_given) options->ctx = *options->ctx_given;
        return run_plan(*options);
    });
}

}  // namespace brigade::node
