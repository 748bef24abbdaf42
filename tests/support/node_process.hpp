#pragma once
// A real `brigade serve` process for multi-process tests: spawned with its own BRIGADE_HOME,
// arguments and environment (optionally inside a network namespace), its stdout and stderr
// captured to files, waited for with timeouts, and always stopped (SIGTERM, then SIGKILL) when
// the object dies. HTTP helpers talk to its API with node/http_client.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "node/http_client.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::test {

using Seconds = std::chrono::seconds;
using Millis = std::chrono::milliseconds;

// Polls `done` every `every` until it returns true or `timeout` passes; returns its last answer.
bool wait_until(const std::function<bool()>& done, Millis timeout, Millis every = Millis(100));

struct NodeSpec {
    std::string name = "node";            // for logs and failure messages
    std::vector<std::string> serve_args;  // after `brigade serve`; port flags are added
    std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing) ours
    std::string netns;           // run inside this network namespace (/run/netns/NAME)
    std::filesystem::path home;  // BRIGADE_HOME; default: a fresh one of its own
    std::string http_host;       // --host; default 127.0.0.1
    bool mesh_port_file = true;  // add --mesh-port 0 --mesh-port-file (unless args set one)
    Seconds ready_timeout{90};   // for the HTTP port file
};

// The answer to one HTTP request; status 0 when the connection failed (`body` says why).
struct HttpReply {
    int status = 0;
    std::string body;
    nlohmann::json json;  // parsed body; discarded (is_discarded()) when not JSON
};

// A streaming (SSE) answer: the `data:` events, parsed.
struct StreamReply {
    int status = 0;
    std::vector<nlohmann::json> chunks;  // events other than [DONE]
    bool done = false;                   // saw [DONE]
    std::string content;                 // concatenated delta.content / text
    std::string finish_reason;
    std::string error_body;
    std::vector<double> arrival_s;    // when each chunk with text arrived, from the request's start
    std::vector<std::string> errors;  // `data: {"error": ...}` events and non-JSON events
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point ended;
};

HttpReply http_get(const node::HttpUrl& url, const std::string& path,
                   Millis timeout = Millis(30'000));
HttpReply http_post(const node::HttpUrl& url, const std::string& path, const nlohmann::json& body,
                    Millis timeout = Millis(120'000));
// `on_text(n)`, if set, runs on the client thread when the n-th chunk carrying text arrives
// (n from 1), so a test can act at an exact point of the generation. `keep_reading(so_far)`,
// if set, runs after each piece of the body; false hangs up (a client that goes away).
StreamReply http_stream(const node::HttpUrl& url, const std::string& path, nlohmann::json body,
                        Millis timeout = Millis(120'000),
                        const std::function<void(std::size_t)>& on_text = {},
                        const std::function<bool(const StreamReply&)>& keep_reading = {});

// `brigade args...` with extra environment variables (e.g. BRIGADE_HOME), as run_brigade.
CommandResult run_brigade_env(const std::vector<std::string>& args,
                              const std::vector<std::pair<std::string, std::string>>& env,
                              int timeout_s = 60);

class NodeProcess {
public:
    explicit NodeProcess(NodeSpec spec);
    ~NodeProcess();  // stop(): SIGTERM, SIGKILL after a few seconds
    NodeProcess(const NodeProcess&) = delete;
    NodeProcess& operator=(const NodeProcess&) = delete;

    // True once the HTTP port file holds a port; false if the process died or timed out
    // (`why()` then says which, with the log tail).
    bool ready() const { return ready_; }
    const std::string& why() const { return why_; }
    pid_t pid() const { return pid_; }
    bool running();  // not exited yet (reaps it if it has)
    const std::string& name() const { return spec_.name; }
    const std::filesystem::path& home() const { return home_; }

    const node::HttpUrl& url() const { return url_; }
    std::string base_url() const;  // http://host:port
    int http_port() const;
    // The mesh port from --mesh-port-file (waits up to `timeout`); nullopt if none appeared.
    std::optional<int> mesh_port(Millis timeout = Millis(10'000));
    // The `brigade serve: invite token: ...` token from stdout (waits up to `timeout`).
    std::optional<std::string> invite_token(Millis timeout = Millis(30'000));

    std::string out() const;  // stdout so far
    std::string err() const;  // stderr so far
    // Both, last `max_bytes` of each, labelled: for failure messages.
    std::string logs(std::size_t max_bytes = 6000) const;
    // Waits for `text` to appear in stdout or stderr.
    bool wait_for_log(const std::string& text, Millis timeout);

    HttpReply get(const std::string& path) const { return http_get(url_, path); }
    HttpReply post(const std::string& path, const nlohmann::json& body) const {
        return http_post(url_, path, body);
    }
    StreamReply stream(const std::string& path, const nlohmann::json& body) const {
        return http_stream(url_, path, body);
    }

    // SIGTERM and wait; the exit code, or -1 when it had to be killed / died of a signal.
    int terminate(Seconds timeout = Seconds(10));
    void kill_now();  // SIGKILL and reap

private:
    void spawn();
    void wait_ready();
    int reap(bool block);

    NodeSpec spec_;
    TempDir dir_;
    std::filesystem::path home_;
    std::filesystem::path port_file_;
    std::filesystem::path mesh_port_file_;
    std::filesystem::path out_path_;
    std::filesystem::path err_path_;
    pid_t pid_ = -1;
    bool ready_ = false;
    std::string why_;
    node::HttpUrl url_;
};

// The mesh's view from one node (GET /v1/mesh); discarded JSON when unavailable.
nlohmann::json mesh_view(const NodeProcess& node);

// Number of stages of the committed plan in `view`, 0 when there is none.
std::size_t plan_stage_count(const nlohmann::json& view);

// Waits until every node's /v1/mesh lists `n_nodes` nodes and a plan of `n_stages` stages with
// the same epoch everywhere; returns the views (empty on timeout; `why` says what was seen).
std::vector<nlohmann::json> wait_for_common_plan(const std::vector<NodeProcess*>& nodes,
                                                 std::size_t n_nodes, std::size_t n_stages,
                                                 Millis timeout, std::string& why);

}  // namespace brigade::test
