#pragma once
// Shared by the mesh_node suite: the single-machine reference (`brigade run`), logprob
// comparisons, and starting a mesh of `brigade serve` processes on loopback.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/node_process.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::test {

inline std::filesystem::path demo_model_dir() { return source_dir() / "model" / "demo"; }
inline constexpr int kDemoLayers = 4;
inline constexpr int kDemoVocab = 4096;

// The demo model's chat template around one user message (its tokenizer_config.json): replies
// run for dozens of tokens, where a bare prompt often ends after a few.
inline std::string demo_chat_prompt(const std::string& user) {
    return "<|bos|><|user|>\n" + user + "<|end|>\n<|assistant|>\n";
}

inline NodeSpec node_spec(std::string name, std::vector<std::string> args, bool mesh = true) {
    NodeSpec spec;
    spec.name = std::move(name);
    spec.serve_args = std::move(args);
    spec.mesh_port_file = mesh;
    return spec;
}

// What `brigade run` generates greedily for a prompt: the text, the token ids and the logits
// of every step (row i = the distribution token i was chosen from).
struct Reference {
    std::string text;
    std::vector<std::int32_t> ids;
    std::vector<std::vector<float>> logits;
    std::string error;  // non-empty when `brigade run` failed
};

inline Reference reference_run(const std::filesystem::path& model, const std::string& prompt,
                               int n_tokens, int vocab) {
    Reference ref;
    const std::vector<std::string> common = {
        "run",    "--model", model.string(), "--prompt", prompt, "-n", std::to_string(n_tokens),
        "--temp", "0",       "--threads",    "2"};
    auto text = run_brigade(common);
    if (text.exit_code != 0) {
        ref.error = "brigade run: " + text.err;
        return ref;
    }
    ref.text = text.out;
    if (!ref.text.empty() && ref.text.back() == '\n') ref.text.pop_back();
    TempDir dir;
    const auto logits_path = dir.path() / "logits.bin";
    auto args = common;
    args.insert(args.end(), {"--print-ids", "--logits-out", logits_path.string()});
    auto ids = run_brigade(args);
    if (ids.exit_code != 0) {
        ref.error = "brigade run --print-ids: " + ids.err;
        return ref;
    }
    std::istringstream in(ids.out);
    for (std::int32_t id = 0; in >> id;) ref.ids.push_back(id);
    const std::string bytes = read_file(logits_path);
    const std::size_t row = static_cast<std::size_t>(vocab) * sizeof(float);
    if (bytes.size() != ref.ids.size() * row) {
        ref.error = "logits file has " + std::to_string(bytes.size()) + " bytes for " +
                    std::to_string(ref.ids.size()) + " tokens of vocab " + std::to_string(vocab);
        return ref;
    }
    for (std::size_t i = 0; i < ref.ids.size(); ++i) {
        std::vector<float> r(static_cast<std::size_t>(vocab));
        std::memcpy(r.data(), bytes.data() + i * row, row);
        ref.logits.push_back(std::move(r));
    }
    return ref;
}

// log softmax(logits)[id], in double.
inline double logprob_of(const std::vector<float>& logits, std::int32_t id) {
    double max = logits[0];
    for (float v : logits) max = std::max(max, static_cast<double>(v));
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
    return static_cast<double>(logits[static_cast<std::size_t>(id)]) - max - std::log(sum);
}

// The gap between the best and second-best logit (how close greedy was to a tie).
inline double top2_margin(const std::vector<float>& logits) {
    float a = -INFINITY;
    float b = -INFINITY;
    for (float v : logits) {
        if (v > a) {
            b = a;
            a = v;
        } else if (v > b) {
            b = v;
        }
    }
    return static_cast<double>(a) - static_cast<double>(b);
}

// A legacy /v1/completions body: greedy, `n` tokens, `top` top logprobs per token.
inline nlohmann::json completion_body(const std::string& prompt, int n, int top = 0) {
    nlohmann::json body = {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}};
    if (top > 0) body["logprobs"] = top;
    return body;
}

// token_logprobs of a /v1/completions reply (empty when absent).
inline std::vector<double> token_logprobs(const nlohmann::json& reply) {
    std::vector<double> out;
    if (!reply.is_object() || !reply.contains("choices")) return out;
    const auto& lp = reply["choices"][0]["logprobs"];
    if (!lp.is_object() || !lp.contains("token_logprobs")) return out;
    for (const auto& v : lp["token_logprobs"]) out.push_back(v.get<double>());
    return out;
}

inline std::string completion_text(const HttpReply& r) {
    if (r.status != 200 || !r.json.is_object()) {
        // Appended, not "<" + ...: GCC 12 warns (-Wrestrict, falsely) on the inlined operator+.
        std::string shown = "<";
        shown.append(std::to_string(r.status)).append(">");
        return shown;
    }
    return r.json["choices"][0]["text"].get<std::string>();
}

// `brigade serve` arguments of a node of a two-node mesh on loopback that finds its peer by
// --peer / --join only (no discovery), offering `memory` to the planner.
inline std::vector<std::string> two_node_mesh_args(const std::string& memory) {
    return {"--model",
            demo_model_dir().string(),
            "--threads",
            "1",
            "--mesh-host",
            "127.0.0.1",
            "--no-discovery",
            "--ctx",
            "256",
            "--max-concurrency",
            "4",
            "--memory",
            memory,
            "--expect-nodes",
            "2"};
}

// The node id of the identity kept in `home` (`brigade mesh id`; made there on first use), or
// "" when the command failed.
inline std::string home_env_id(const std::filesystem::path& home) {
    auto r = run_brigade_env({"mesh", "id"}, {{"BRIGADE_HOME", home.string()}});
    if (r.exit_code != 0) return "";
    while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == ' ')) r.out.pop_back();
    return r.out;
}

// An invite token of a new mesh whose secret is kept in `home` (`brigade mesh token` before any
// node runs: it lists no addresses), or "" when the command failed.
inline std::string token_of_new_mesh(const std::filesystem::path& home) {
    auto r = run_brigade_env({"mesh", "token"}, {{"BRIGADE_HOME", home.string()}});
    if (r.exit_code != 0) return "";
    while (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
    return r.out;
}

}  // namespace brigade::test
