// `brigade status`: the mesh as one node sees it (GET /v1/mesh), printed for people: the nodes
// with their state, memory, backend and speed, the committed plan's stages with their layers
// and timings, the links' round-trip times, and the node's requests (GET /health). `--json`
// prints /v1/mesh's JSON as it is.
//
//   brigade status                              # the node serving on 127.0.0.1:8177
//   brigade status --url http://10.0.0.5:8177 --json
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node/commands.hpp"
#include "node/http_client.hpp"
#include "node/status_text.hpp"

namespace brigade::node {
namespace {

using nlohmann::json;

struct StatusArgs {
    std::string url = "http://127.0.0.1:8177";
    std::string api_key;
    bool json = false;
    double timeout_s = 10;
};

int fail(const std::string& message) {
    std::fprintf(stderr, "brigade status: error: %s\n", message.c_str());
    return 1;
}

int status_command(const StatusArgs& args) {
    auto url = parse_http_url(args.url);
    if (!url) return fail(url.error().message);
    if (args.timeout_s <= 0) return fail("--timeout must be > 0");
    HttpRequest req;
    req.target = url->base_path + "/v1/mesh";
    req.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(args.timeout_s * 1000));
    if (!args.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + args.api_key);
    auto resp = http_request(*url, req);
    if (!resp) {
        return fail("cannot reach " + args.url + ": " + resp.error().message +
                    " (is `brigade serve` running there?)");
    }
    const auto body = json::parse(resp->body, nullptr, /*allow_exceptions=*/false);
    if (resp->status != 200) {
        std::string why = resp->body;
        if (body.is_object() && body.contains("error") && body["error"].is_object() &&
            body["error"].contains("message") && body["error"]["message"].is_string()) {
            why = body["error"]["message"].get<std::string>();
        }
        return fail(args.url + "/v1/mesh answered " + std::to_string(resp->status) + ": " + why);
    }
    if (!body.is_object()) return fail(args.url + "/v1/mesh did not answer a JSON object");
    if (args.json) {
        std::printf("%s\n", body.dump(2).c_str());
        return 0;
    }
    std::string out = format_status(body);
    // The node's load is on /health; a node too old to report it just goes without the line.
    req.target = url->base_path + "/health";
    if (auto health = http_request(*url, req); health && health->status == 200) {
        out += format_load(json::parse(health->body, nullptr, /*allow_exceptions=*/false));
    }
    std::fputs(out.c_str(), stdout);
    return 0;
}

}  // namespace

void add_status_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<StatusArgs>();
    auto* sub = app.add_subcommand(
        "status", "Show the mesh a node belongs to: nodes, the layer plan, link latencies");
    sub->add_option("--url", args->url, "The node's API (default http://127.0.0.1:8177)");
    sub->add_option("--api-key", args->api_key, "Sent as 'Authorization: Bearer KEY'");
    sub->add_option("--timeout", args->timeout_s, "Seconds to wait for the answer (default 10)");
    sub->add_flag("--json", args->json, "Print the /v1/mesh JSON as it is");
    commands.add(sub, [args] { return status_command(*args); });
}

}  // namespace brigade::node
