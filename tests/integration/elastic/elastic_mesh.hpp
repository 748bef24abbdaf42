#pragma once
// A mesh of `brigade serve` processes on loopback whose membership changes while it serves: nodes
// are killed (-9), stopped (SIGTERM), added and restarted, and the test follows the plan through
// GET /v1/mesh. Membership timeouts are short (suspect 1 s, dead 3 s) so that a silent node is
// noticed within seconds (a killed one sooner: its links drop), yet long enough that a node of a
// busy test machine that is not scheduled for a moment is not declared dead; every wait is
// bounded.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/mesh_node/mesh_node_util.hpp"
#include "tests/integration/mesh_node/pipeline_compare.hpp"
#include "tests/support/node_process.hpp"

namespace brigade::test {

using SteadyClock = std::chrono::steady_clock;

// Membership times for these tests (the defaults are 2.5 s / 6 s).
inline constexpr int kSuspectAfterMs = 1000;
inline constexpr int kDeadAfterMs = 3000;

// The demo model (4 layers, ~0.57 MB per layer, 1.5 MB embedding, tied lm_head) with --ctx 256:
// one node needs 4.36 MB and two need 2.97 MB each, so 2.6 MB per node forces exactly three
// stages (see tests/integration/mesh_node/pipeline_test.cpp and `brigade plan`). A node of
// 16 MB holds the whole model alone.
inline constexpr const char* kThreeStageMemory = "2.6MB";
inline constexpr const char* kWholeModelMemory = "16MB";

// The demo model's reply to this prompt loops until the length limit: a 200-token greedy
// generation never ends early on EOS (checked by the tests against `brigade run`).
inline const std::string kLongUser = "Tell me a story about a cat.";
inline const std::vector<std::string> kShortUsers = {
    "Where do birds live?", "What did the little boy eat?", "Once upon a time there was a king."};

inline std::string elapsed_ms_text(SteadyClock::time_point from, SteadyClock::time_point to) {
    return std::to_string(std::chrono::duration_cast<Millis>(to - from).count()) + " ms";
}

// A BRIGADE_HOME made before the node starts, so its node id is known in advance.
struct PreparedHome {
    std::filesystem::path dir;
    std::string id;  // as /v1/mesh spells it (base32hex; string order = id order)
};

inline std::optional<PreparedHome> prepare_home(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    auto r = run_brigade_env({"mesh", "id"}, {{"BRIGADE_HOME", dir.string()}});
    if (r.exit_code != 0) return std::nullopt;
    std::string id = r.out;
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
    if (id.empty()) return std::nullopt;
    return PreparedHome{dir, id};
}

// One streaming request whose progress the test can act on: `on_text(n)` runs on the client
// thread when the n-th chunk carrying text arrives (n from 1), so a node can be killed at an
// exact point of the generation.
struct WatchedStream {
    int status = 0;
    std::string content;
    std::string finish_reason;
    bool done = false;                              // saw [DONE]
    std::vector<std::string> errors;                // `data: {"error": ...}` events
    std::string error_body;                         // non-200 body or transport error
    std::vector<SteadyClock::time_point> arrivals;  // one per chunk with text
    SteadyClock::time_point started;
    SteadyClock::time_point ended;
};

inline WatchedStream watched_stream(const node::HttpUrl& url, const std::string& path,
                                    nlohmann::json body,
                                    const std::function<void(std::size_t)>& on_text,
                                    Millis timeout = Millis(120'000)) {
    // The harness's stream reader records arrivals relative to its start; `on_text` stamps
    // them on the steady clock here, where the disruption tests compare them with events.
    std::vector<SteadyClock::time_point> arrivals;
    StreamReply r = http_stream(url, path, std::move(body), timeout, [&](std::size_t n) {
        arrivals.push_back(SteadyClock::now());
        if (on_text) on_text(n);
    });
    WatchedStream s;
    s.status = r.status;
    s.content = std::move(r.content);
    s.finish_reason = std::move(r.finish_reason);
    s.done = r.done;
    s.errors = std::move(r.errors);
    s.error_body = std::move(r.error_body);
    s.arrivals = std::move(arrivals);
    s.started = r.started;
    s.ended = r.ended;
    return s;
}

// The first chunk that arrived after the longest silence following `event`: the first token
// of the resumed generation. Returns the time from `event` to it (nullopt: nothing after).
inline std::optional<Millis> first_token_after_gap(const WatchedStream& s,
                                                   SteadyClock::time_point event) {
    std::optional<std::size_t> best;
    SteadyClock::duration best_gap{};
    for (std::size_t i = 0; i < s.arrivals.size(); ++i) {
        if (s.arrivals[i] <= event) continue;
        const auto prev = i == 0 ? s.started : std::max(s.arrivals[i - 1], event);
        if (!best || s.arrivals[i] - prev > best_gap) {
            best = i;
            best_gap = s.arrivals[i] - prev;
        }
    }
    if (!best) return std::nullopt;
    return std::chrono::duration_cast<Millis>(s.arrivals[*best] - event);
}

// Everything a stream should be when nothing was lost: 200, no error event, [DONE], the
// reference text (token for token: F32 activations), the finish reason of the reference.
inline void expect_complete_stream(const WatchedStream& s, const Reference& ref,
                                   const std::string& what, const std::string& logs) {
    EXPECT_EQ(s.status, 200) << what << ": " << s.error_body << "\n" << logs;
    EXPECT_TRUE(s.errors.empty()) << what << ": error events: "
                                  << (s.errors.empty() ? "" : s.errors.front()) << "\n"
                                  << logs;
    EXPECT_TRUE(s.done) << what << ": no [DONE]; " << s.error_body << "\n" << logs;
    EXPECT_EQ(s.content, ref.text) << what << ": the text differs from `brigade run`\n" << logs;
    EXPECT_EQ(s.finish_reason, ref.ids.size() >= 200 ? "length" : "stop") << what;
}

struct ElasticMeshSpec {
    std::string name = "el";
    std::filesystem::path model = demo_model_dir();
    std::string activations = "f32";
    // Given to every node after the common flags (e.g. --drain-ms).
    std::vector<std::string> extra_args;
    Millis plan_timeout = Millis(60'000);
    // Network namespaces (tests/support/netns_lan.hpp): node i runs in netns_of(i) and listens
    // (HTTP and mesh) on address_of(i). Unset: everything on 127.0.0.1.
    std::function<std::string(std::size_t)> netns_of;
    std::function<std::string(std::size_t)> address_of;
    bool discovery = false;  // multicast beacons as well as --peer seeds (a LAN of namespaces)
};

inline ElasticMeshSpec elastic_spec(std::string name) {
    ElasticMeshSpec spec;
    spec.name = std::move(name);
    return spec;
}

class ElasticMesh {
public:
    explicit ElasticMesh(ElasticMeshSpec spec) : spec_(std::move(spec)) {}
    ~ElasticMesh() {
        // Stop everything at once (a graceful stop of one would otherwise wait for re-plans).
        for (auto& n : nodes_) {
            if (n->running()) ::kill(n->pid(), SIGKILL);
        }
    }
    ElasticMesh(const ElasticMesh&) = delete;
    ElasticMesh& operator=(const ElasticMesh&) = delete;

    // A home whose node id is unknown to the mesh so far (`id_above`: only an id greater than
    // it, e.g. so that a newcomer does not become the coordinator). Empty on failure.
    std::optional<PreparedHome> new_home(const std::string& id_above = "") {
        return new_home_where([&](const std::string& id) { return id > id_above; }, 24);
    }

    // A home whose node id is below `id_below` (so that its node coordinates once it joins).
    // Each try has a fair chance against a few random ids; empty after 64 misses.
    std::optional<PreparedHome> new_home_below(const std::string& id_below) {
        return new_home_where([&](const std::string& id) { return id < id_below; }, 64);
    }

    // Starts `memory.size()` nodes (the first creates the mesh) and waits for a common plan of
    // `stages` stages. Empty string on success, else what went wrong with the logs.
    std::string start(const std::vector<std::string>& memory, std::size_t stages) {
        for (std::size_t i = 0; i < memory.size(); ++i) {
            auto* n = add_node(memory[i], static_cast<int>(memory.size()));
            if (n == nullptr) return error_;
        }
        return wait_plan(memory.size(), stages);
    }

    // Starts one more node (joining through a live node) without waiting for any plan; null
    // (error() says why) when it did not start. `expect_nodes` > 1 makes it ready at once; 0
    // leaves the flag out: then the node is ready once it serves the mesh's plan (or knows that
    // nothing fits).
    NodeProcess* add_node(const std::string& memory, int expect_nodes,
                          std::optional<PreparedHome> home = std::nullopt,
                          const std::vector<std::string>& more_args = {}) {
        std::vector<std::string> args = {"--model",
                                         spec_.model.string(),
                                         "--threads",
                                         "1",
                                         "--ctx",
                                         "256",
                                         "--max-concurrency",
                                         "4",
                                         "--activations",
                                         spec_.activations,
                                         "--suspect-after",
                                         std::to_string(kSuspectAfterMs),
                                         "--dead-after",
                                         std::to_string(kDeadAfterMs)};
        if (expect_nodes > 0)
            args.insert(args.end(), {"--expect-nodes", std::to_string(expect_nodes)});
        const std::size_t index = nodes_.size();
        const std::string host = spec_.address_of ? spec_.address_of(index) : "127.0.0.1";
        args.insert(args.end(), {"--mesh-host", host});
        if (!spec_.discovery) args.emplace_back("--no-discovery");
        if (!memory.empty()) args.insert(args.end(), {"--memory", memory});
        args.insert(args.end(), spec_.extra_args.begin(), spec_.extra_args.end());
        args.insert(args.end(), more_args.begin(), more_args.end());
        if (!token_.empty()) {
            auto* peer = any_live_node();
            if (peer == nullptr) {
                error_ = "no live node to join through";
                return nullptr;
            }
            const auto port = peer->mesh_port();
            if (!port) {
                error_ = peer->name() + " has no mesh port\n" + logs();
                return nullptr;
            }
            args.insert(args.end(),
                        {"--join", token_, "--peer", host_of(peer) + ":" + std::to_string(*port)});
        }
        if (!home) home = new_home();
        if (!home) {
            error_ = "cannot prepare a BRIGADE_HOME (`brigade mesh id` failed)";
            return nullptr;
        }
        NodeSpec spec = node_spec(spec_.name + "-" + std::to_string(index), args);
        spec.home = home->dir;
        spec.http_host = host;
        if (spec_.netns_of) spec.netns = spec_.netns_of(index);
        hosts_.push_back(host);
        homes_of_.push_back(*home);
        nodes_.push_back(std::make_unique<NodeProcess>(spec));
        NodeProcess* n = nodes_.back().get();
        if (!n->ready()) {
            error_ = n->why();
            return nullptr;
        }
        if (token_.empty()) {
            auto token = n->invite_token();
            if (!token) {
                error_ = "the first node printed no invite token\n" + n->logs();
                return nullptr;
            }
            token_ = *token;
        }
        return n;
    }

    // Waits until every live node sees `n_nodes` members and the same plan of `stages` stages;
    // `check` (optional) must also hold for the common view. Empty string on success.
    std::string wait_plan(std::size_t n_nodes, std::size_t stages,
                          const std::function<bool(const nlohmann::json&)>& check = {},
                          std::optional<Millis> timeout = std::nullopt) {
        std::string why;
        const auto deadline = SteadyClock::now() + timeout.value_or(spec_.plan_timeout);
        while (true) {
            const auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now());
            if (left.count() <= 0) break;
            auto views = wait_for_common_plan(live_nodes(), n_nodes, stages, left, why);
            if (!views.empty() && (!check || check(views[0]))) {
                views_ = std::move(views);
                return "";
            }
            if (!views.empty())
                why = "the common plan does not satisfy the test: " + views[0].dump();
            std::this_thread::sleep_for(Millis(200));
        }
        error_ = "no common plan of " + std::to_string(stages) + " stages over " +
                 std::to_string(n_nodes) + " nodes: " + why + "\n" + logs();
        return error_;
    }

    const std::string& error() const { return error_; }
    const nlohmann::json& view() const { return views_.at(0); }
    std::int64_t epoch() const { return view()["plan"]["epoch"].get<std::int64_t>(); }

    // Running nodes whose API the test can reach (see set_reachable).
    std::vector<NodeProcess*> live_nodes() {
        std::vector<NodeProcess*> out;
        for (auto& n : nodes_) {
            if (n->running() && std::find(unreachable_.begin(), unreachable_.end(), n.get()) ==
                                    unreachable_.end()) {
                out.push_back(n.get());
            }
        }
        return out;
    }
    // The live nodes but `victim`: where a disruption's requests can enter.
    std::vector<NodeProcess*> live_nodes_except(const NodeProcess* victim) {
        std::vector<NodeProcess*> out = live_nodes();
        out.erase(std::remove(out.begin(), out.end(), victim), out.end());
        return out;
    }
    // A node cut off the network still runs but cannot be asked: leave it out of the views.
    void set_reachable(NodeProcess* node, bool reachable) {
        std::erase(unreachable_, node);
        if (!reachable) unreachable_.push_back(node);
    }
    NodeProcess* any_live_node() {
        auto live = live_nodes();
        return live.empty() ? nullptr : live.front();
    }
    NodeProcess* node_with_id(const std::string& id) {
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (homes_of_[i].id == id && nodes_[i]->running()) return nodes_[i].get();
        }
        return nullptr;
    }
    std::string id_of(const NodeProcess* node) const { return home_of(node).id; }
    // The home (and so the identity) a node ran with: a restart with it is the same node.
    PreparedHome home_of(const NodeProcess* node) const {
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (nodes_[i].get() == node) return homes_of_[i];
        }
        return {};
    }
    std::string host_of(const NodeProcess* node) const {
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (nodes_[i].get() == node) return hosts_[i];
        }
        return "127.0.0.1";
    }
    // The index a node was started with (its name's suffix; what netns_of/address_of got).
    std::size_t index_of(const NodeProcess* node) const {
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (nodes_[i].get() == node) return i;
        }
        return nodes_.size();
    }

    // Roles in the last common view.
    NodeProcess* stage_node(std::size_t i) {
        if (plan_stage_count(view()) <= i) return nullptr;
        return node_with_id(view()["plan"]["stages"][i]["node"].get<std::string>());
    }
    NodeProcess* coordinator() { return node_with_id(view()["coordinator"].get<std::string>()); }
    bool in_plan(const NodeProcess* node) const {
        const auto id = id_of(node);
        for (const auto& s : view()["plan"]["stages"]) {
            if (s["node"] == id) return true;
        }
        return false;
    }
    // Live nodes that hold no stage.
    std::vector<NodeProcess*> spares() {
        std::vector<NodeProcess*> out;
        for (auto* n : live_nodes()) {
            if (!in_plan(n)) out.push_back(n);
        }
        return out;
    }

    std::string logs(std::size_t per_node = 2500) const {
        std::string out;
        for (const auto& n : nodes_) out += n->logs(per_node);
        return out;
    }

private:
    // Fresh identities until one's id satisfies `wanted`; empty after `attempts` or on failure.
    template <class Pred>
    std::optional<PreparedHome> new_home_where(const Pred& wanted, int attempts) {
        for (int attempt = 0; attempt < attempts; ++attempt) {
            std::string name = "h";
            name += std::to_string(next_home_++);
            auto home = prepare_home(homes_.path() / name);
            if (!home) return std::nullopt;
            if (wanted(home->id)) return home;
        }
        return std::nullopt;
    }

    ElasticMeshSpec spec_;
    TempDir homes_;
    int next_home_ = 0;
    std::vector<std::unique_ptr<NodeProcess>> nodes_;
    std::vector<NodeProcess*> unreachable_;
    std::vector<PreparedHome> homes_of_;
    std::vector<std::string> hosts_;
    std::vector<nlohmann::json> views_;
    std::string token_;
    std::string error_;
};

// The greedy reference for `user` through the demo chat template: `brigade run`, once per binary.
inline const Reference& long_reference(int n_tokens = 200) {
    return cached_reference(demo_model_dir(), demo_chat_prompt(kLongUser), n_tokens, kDemoVocab);
}

inline nlohmann::json long_completion_body(int n_tokens = 200) {
    return completion_body(demo_chat_prompt(kLongUser), n_tokens);
}

inline nlohmann::json long_chat_body(int n_tokens = 200) {
    return {{"messages", {{{"role", "user"}, {"content", kLongUser}}}},
            {"temperature", 0},
            {"max_tokens", n_tokens}};
}

}  // namespace brigade::test
