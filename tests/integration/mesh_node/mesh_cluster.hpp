#pragma once
// A mesh of `brigade serve` processes on loopback: the first node creates the mesh and prints
// its invite token, the others join with it (and a --peer seed, so no discovery is needed).
// Each node has its own BRIGADE_HOME, HTTP port and mesh port.

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/mesh_node/mesh_node_util.hpp"

namespace brigade::test {

struct ClusterSpec {
    std::string name = "mesh";
    std::filesystem::path model = demo_model_dir();
    std::vector<std::string> memory;  // --memory of each node ("" = none); its size = node count
    std::string activations;          // --activations ("" = the default, BF16)
    std::size_t expected_stages = 1;
    std::vector<std::string> extra_args;  // given to every node
    Millis plan_timeout = Millis(60'000);
};

class LoopbackMesh {
public:
    explicit LoopbackMesh(ClusterSpec spec) : spec_(std::move(spec)) { start(); }

    // Empty when the mesh formed with the expected plan; else what went wrong, with logs.
    const std::string& error() const { return error_; }
    std::vector<std::unique_ptr<NodeProcess>>& nodes() { return nodes_; }
    NodeProcess& node(std::size_t i) { return *nodes_.at(i); }
    const std::vector<nlohmann::json>& views() const { return views_; }
    const std::string& token() const { return token_; }

    // The node running stage `i` of the plan (nullptr if unknown).
    NodeProcess* stage_node(std::size_t i) {
        if (views_.empty() || plan_stage_count(views_[0]) <= i) return nullptr;
        const auto id = views_[0]["plan"]["stages"][i]["node"];
        for (std::size_t n = 0; n < nodes_.size(); ++n) {
            if (views_[n]["self"] == id) return nodes_[n].get();
        }
        return nullptr;
    }
    // A node that is not the head (the tail when there are several stages).
    NodeProcess* non_head() {
        auto* head = stage_node(0);
        for (auto& n : nodes_) {
            if (n.get() != head) return n.get();
        }
        return nullptr;
    }
    std::string logs() const {
        std::string out;
        for (const auto& n : nodes_) out += n->logs(3000);
        return out;
    }

private:
    std::vector<std::string> node_args(std::size_t i) const {
        std::vector<std::string> args = {"--model",
                                         spec_.model.string(),
                                         "--threads",
                                         "1",
                                         "--mesh-host",
                                         "127.0.0.1",
                                         "--no-discovery",
                                         "--expect-nodes",
                                         std::to_string(spec_.memory.size())};
        if (!spec_.memory[i].empty()) args.insert(args.end(), {"--memory", spec_.memory[i]});
        if (!spec_.activations.empty())
            args.insert(args.end(), {"--activations", spec_.activations});
        args.insert(args.end(), spec_.extra_args.begin(), spec_.extra_args.end());
        return args;
    }

    void start() {
        auto first = std::make_unique<NodeProcess>(node_spec(spec_.name + "-0", node_args(0)));
        if (!first->ready()) {
            error_ = first->why();
            nodes_.push_back(std::move(first));
            return;
        }
        auto token = first->invite_token();
        auto port = first->mesh_port();
        if (!token || !port) {
            error_ = "the first node printed no invite token or mesh port\n" + first->logs();
            nodes_.push_back(std::move(first));
            return;
        }
        token_ = *token;
        nodes_.push_back(std::move(first));
        for (std::size_t i = 1; i < spec_.memory.size(); ++i) {
            auto args = node_args(i);
            args.insert(args.end(),
                        {"--join", token_, "--peer", "127.0.0.1:" + std::to_string(*port)});
            nodes_.push_back(std::make_unique<NodeProcess>(
                node_spec(spec_.name + "-" + std::to_string(i), args)));
            if (!nodes_.back()->ready()) {
                error_ = nodes_.back()->why();
                return;
            }
        }
        std::vector<NodeProcess*> all;
        for (auto& n : nodes_) all.push_back(n.get());
        std::string why;
        views_ =
            wait_for_common_plan(all, all.size(), spec_.expected_stages, spec_.plan_timeout, why);
        if (views_.empty()) {
            error_ = "no common plan of " + std::to_string(spec_.expected_stages) +
                     " stages: " + why + "\n" + logs();
        }
    }

    ClusterSpec spec_;
    std::vector<std::unique_ptr<NodeProcess>> nodes_;
    std::vector<nlohmann::json> views_;
    std::string token_;
    std::string error_;
};

}  // namespace brigade::test
