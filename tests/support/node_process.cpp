#include "tests/support/node_process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "api/sse.hpp"

extern char** environ;

namespace brigade::test {
namespace {

using Clock = std::chrono::steady_clock;

std::optional<int> read_port(const std::filesystem::path& file) {
    std::ifstream in(file);
    int port = 0;
    if (in >> port && port > 0 && port < 65536) return port;
    return std::nullopt;
}

std::string tail(const std::string& text, std::size_t max_bytes) {
    if (text.size() <= max_bytes) return text;
    return "..." + text.substr(text.size() - max_bytes);
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
    for (const auto& a : args) {
        if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
    }
    return false;
}

HttpReply to_reply(model::Result<node::HttpResponse> resp) {
    HttpReply r;
    if (!resp) {
        r.body = resp.error().message;
        r.json = nlohmann::json::parse("", nullptr, false);
        return r;
    }
    r.status = resp->status;
    r.body = std::move(resp->body);
    r.json = nlohmann::json::parse(r.body, nullptr, false);
    return r;
}

}  // namespace

bool wait_until(const std::function<bool()>& done, Millis timeout, Millis every) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
        if (done()) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(every);
    }
}

HttpReply http_get(const node::HttpUrl& url, const std::string& path, Millis timeout) {
    node::HttpRequest req;
    req.target = path;
    req.timeout = timeout;
    return to_reply(node::http_request(url, req));
}

HttpReply http_post(const node::HttpUrl& url, const std::string& path, const nlohmann::json& body,
                    Millis timeout) {
    node::HttpRequest req;
    req.method = "POST";
    req.target = path;
    req.body = body.dump();
    req.timeout = timeout;
    req.headers.emplace_back("Content-Type", "application/json");
    return to_reply(node::http_request(url, req));
}

StreamReply http_stream(const node::HttpUrl& url, const std::string& path, nlohmann::json body,
                        Millis timeout, const std::function<void(std::size_t)>& on_text,
                        const std::function<bool(const StreamReply&)>& keep_reading) {
    body["stream"] = true;
    node::HttpRequest req;
    req.method = "POST";
    req.target = path;
    req.body = body.dump();
    req.timeout = timeout;
    req.headers.emplace_back("Content-Type", "application/json");
    StreamReply s;
    api::SseParser parser;
    std::vector<api::SseMessage> events;
    const auto start = Clock::now();
    req.on_head = [&](const node::HttpResponse& h) { s.status = h.status; };
    req.on_body = [&](std::string_view bytes) {
        if (s.status != 200) {
            s.error_body.append(bytes);
            return true;
        }
        events.clear();
        parser.feed(bytes, events);
        for (const auto& e : events) {
            if (e.comment) continue;
            if (e.data == "[DONE]") {
                s.done = true;
                continue;
            }
            auto j = nlohmann::json::parse(e.data, nullptr, false);
            s.chunks.push_back(j);
            if (!j.is_object()) {
                s.errors.push_back("not JSON: " + e.data);
                continue;
            }
            if (j.contains("error")) s.errors.push_back(j["error"].dump());
            if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
                continue;
            }
            const auto& c = j["choices"][0];
            std::string piece;
            if (c.contains("delta") && c["delta"].contains("content") &&
                c["delta"]["content"].is_string()) {
                piece = c["delta"]["content"].get<std::string>();
            }
            if (c.contains("text") && c["text"].is_string()) piece += c["text"].get<std::string>();
            if (!piece.empty()) {
                s.content += piece;
                s.arrival_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
                if (on_text) on_text(s.arrival_s.size());
            }
            if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
                s.finish_reason = c["finish_reason"].get<std::string>();
            }
        }
        return !keep_reading || keep_reading(s);
    };
    s.started = start;
    auto resp = node::http_request(url, req);
    s.ended = Clock::now();
    if (!resp) s.error_body += resp.error().message;
    return s;
}

CommandResult run_brigade_env(const std::vector<std::string>& args,
                              const std::vector<std::pair<std::string, std::string>>& env,
                              int timeout_s) {
    // run_brigade passes our environment on: run it in a child that sets the variables first,
    // so this (multi-threaded) test process never changes its own environment.
    TempDir dir;
    const auto out_path = dir.path() / "out";
    const auto err_path = dir.path() / "err";
    std::vector<std::string> argv_s = {brigade_binary().string()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string kv = *e;
        const auto eq = kv.find('=');
        if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : env) vars[k] = v;
    std::vector<std::string> env_s;
    for (const auto& [k, v] : vars) env_s.push_back(k + "=" + v);
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    CommandResult result;
    const pid_t pid = fork();
    if (pid == 0) {
        const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int null = open("/dev/null", O_RDONLY);
        if (out < 0 || err < 0 || null < 0) _exit(126);
        dup2(null, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(err, STDERR_FILENO);
        execve(argv[0], argv.data(), envp.data());
        _exit(127);
    }
    if (pid < 0) return result;
    int status = 0;
    const bool done = wait_until([&] { return waitpid(pid, &status, WNOHANG) == pid; },
                                 Seconds(timeout_s), Millis(10));
    if (!done) {
        ::kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = read_file(out_path);
    result.err = read_file(err_path);
    return result;
}

NodeProcess::NodeProcess(NodeSpec spec) : spec_(std::move(spec)) {
    home_ = spec_.home.empty() ? dir_.path() / "home" : spec_.home;
    std::filesystem::create_directories(home_);
    port_file_ = dir_.path() / "http.port";
    mesh_port_file_ = dir_.path() / "mesh.port";
    out_path_ = dir_.path() / "stdout.log";
    err_path_ = dir_.path() / "stderr.log";
    spawn();
    if (pid_ > 0) wait_ready();
}

NodeProcess::~NodeProcess() {
    if (pid_ > 0 && terminate(Seconds(5)) == -1 && pid_ > 0) kill_now();
}

void NodeProcess::spawn() {
    // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
    std::vector<std::string> args = {brigade_binary().string(), "serve"};
    args.insert(args.end(), spec_.serve_args.begin(), spec_.serve_args.end());
    const std::string host = spec_.http_host.empty() ? "127.0.0.1" : spec_.http_host;
    if (!has_flag(spec_.serve_args, "--host")) args.insert(args.end(), {"--host", host});
    if (!has_flag(spec_.serve_args, "--port")) {
        args.insert(args.end(), {"--port", "0", "--port-file", port_file_.string()});
    }
    if (spec_.mesh_port_file && !has_flag(spec_.serve_args, "--mesh-port")) {
        args.insert(args.end(), {"--mesh-port", "0", "--mesh-port-file", mesh_port_file_.string()});
    }
    url_.host = host;

    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string kv = *e;
        const auto eq = kv.find('=');
        if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env["BRIGADE_HOME"] = home_.string();
    for (const auto& [k, v] : spec_.env) env[k] = v;
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);

    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string netns_path = spec_.netns.empty() ? "" : "/run/netns/" + spec_.netns;

    pid_ = fork();
    if (pid_ == 0) {
        setpgid(0, 0);  // its own process group: our signals go to it alone
        const int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int null = open("/dev/null", O_RDONLY);
        if (out < 0 || err < 0 || null < 0) _exit(126);
        dup2(null, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(err, STDERR_FILENO);
        if (!netns_path.empty()) {
            const int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
            if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
                const char msg[] = "node_process: cannot enter the network namespace\n";
                (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
                _exit(125);
            }
        }
        execve(argv[0], argv.data(), envp.data());
        _exit(127);
    }
    if (pid_ < 0) why_ = spec_.name + ": fork failed: " + std::strerror(errno);
}

void NodeProcess::wait_ready() {
    const auto deadline = Clock::now() + spec_.ready_timeout;
    while (Clock::now() < deadline) {
        if (auto port = read_port(port_file_)) {
            url_.port = std::to_string(*port);
            ready_ = true;
            return;
        }
        if (!running()) {
            why_ = spec_.name + " exited before it was ready\n" + logs();
            return;
        }
        std::this_thread::sleep_for(Millis(50));
    }
    why_ = spec_.name + " was not ready within " + std::to_string(spec_.ready_timeout.count()) +
           " s\n" + logs();
}

int NodeProcess::reap(bool block) {
    if (pid_ <= 0) return -2;
    int status = 0;
    const pid_t got = waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (got != pid_) return -2;  // still running
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool NodeProcess::running() { return pid_ > 0 && reap(false) == -2; }

std::string NodeProcess::base_url() const { return "http://" + url_.host + ":" + url_.port; }

int NodeProcess::http_port() const { return url_.port.empty() ? 0 : std::stoi(url_.port); }

std::optional<int> NodeProcess::mesh_port(Millis timeout) {
    std::optional<int> port;
    wait_until([&] { return (port = read_port(mesh_port_file_)).has_value(); }, timeout,
               Millis(50));
    return port;
}

std::optional<std::string> NodeProcess::invite_token(Millis timeout) {
    static constexpr std::string_view kPrefix = "invite token: ";
    std::optional<std::string> token;
    wait_until(
        [&] {
            const auto text = out();
            const auto at = text.find(kPrefix);
            if (at == std::string::npos) return false;
            const auto start = at + kPrefix.size();
            const auto end = text.find_first_of(" \r\n", start);
            if (end == std::string::npos) return false;  // the line is not complete yet
            token = text.substr(start, end - start);
            return true;
        },
        timeout, Millis(50));
    return token;
}

std::string NodeProcess::out() const { return read_file(out_path_); }
std::string NodeProcess::err() const { return read_file(err_path_); }

std::string NodeProcess::logs(std::size_t max_bytes) const {
    return "--- " + spec_.name + " stdout ---\n" + tail(out(), max_bytes) + "\n--- " + spec_.name +
           " stderr ---\n" + tail(err(), max_bytes) + "\n";
}

bool NodeProcess::wait_for_log(const std::string& text, Millis timeout) {
    return wait_until(
        [&] {
            return out().find(text) != std::string::npos || err().find(text) != std::string::npos;
        },
        timeout, Millis(50));
}

int NodeProcess::terminate(Seconds timeout) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int code = -2;
    wait_until([&] { return (code = reap(false)) != -2; }, timeout, Millis(20));
    if (code == -2) {
        kill_now();
        return -1;
    }
    return code;
}

void NodeProcess::kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap(true);
}

nlohmann::json mesh_view(const NodeProcess& node) {
    auto r = node.get("/v1/mesh");
    if (r.status != 200) return nlohmann::json::parse("", nullptr, false);
    return r.json;
}

std::size_t plan_stage_count(const nlohmann::json& view) {
    if (!view.is_object() || !view.contains("plan") || !view["plan"].is_object()) return 0;
    const auto& stages = view["plan"]["stages"];
    return stages.is_array() ? stages.size() : 0;
}

std::vector<nlohmann::json> wait_for_common_plan(const std::vector<NodeProcess*>& nodes,
                                                 std::size_t n_nodes, std::size_t n_stages,
                                                 Millis timeout, std::string& why) {
    std::vector<nlohmann::json> views;
    const bool ok = wait_until(
        [&] {
            views.clear();
            for (auto* n : nodes) views.push_back(mesh_view(*n));
            for (std::size_t i = 0; i < views.size(); ++i) {
                const auto& v = views[i];
                if (v.is_discarded() || !v.contains("nodes") || !v["nodes"].is_array()) {
                    why = nodes[i]->name() + ": no /v1/mesh";
                    return false;
                }
                if (v["nodes"].size() != n_nodes || plan_stage_count(v) != n_stages) {
                    why = nodes[i]->name() + " sees " + v.dump();
                    return false;
                }
                if (v["plan"]["epoch"] != views[0]["plan"]["epoch"] ||
                    v["plan"]["stages"].size() != views[0]["plan"]["stages"].size()) {
                    why = "plans differ: " + views[0].dump() + "\nvs " + v.dump();
                    return false;
                }
            }
            return true;
        },
        timeout, Millis(200));
    if (!ok) views.clear();
    return views;
}

}  // namespace brigade::test
