#pragma once
// Starts the real `brigade serve` binary on the demo model (port 0 + --port-file, so parallel
// test runs never collide), talks to it with node/http_client, stops it with SIGTERM.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "node/http_client.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::test {

class ServeProcess {
public:
    // Extra `brigade serve` arguments; the demo model, port 0 and a port file are added.
    explicit ServeProcess(std::vector<std::string> extra) {
        const auto port_file = dir_.path() / "port";
        log_path_ = dir_.path() / "serve.log";
        std::vector<std::string> args = {
            brigade_binary().string(), "serve",     "--port", "0", "--port-file",
            port_file.string(),        "--threads", "2"};
        args.insert(args.end(), extra.begin(), extra.end());
        pid_ = fork();
        if (pid_ == 0) {
            const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (log >= 0) {
                dup2(log, STDOUT_FILENO);
                dup2(log, STDERR_FILENO);
            }
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (std::chrono::steady_clock::now() < deadline) {
            std::ifstream in(port_file);
            int port = 0;
            if (in >> port && port > 0) {
                url_.host = "127.0.0.1";
                url_.port = std::to_string(port);
                return;
            }
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    ~ServeProcess() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    ServeProcess(const ServeProcess&) = delete;
    ServeProcess& operator=(const ServeProcess&) = delete;

    bool ready() const { return pid_ > 0 && !url_.port.empty(); }
    pid_t pid() const { return pid_; }
    const node::HttpUrl& url() const { return url_; }
    std::string base_url() const { return "http://127.0.0.1:" + url_.port; }
    std::string log() const { return read_file(log_path_); }

    // SIGTERM, then the exit status (-1 if it had to be killed after `timeout`).
    int terminate(std::chrono::seconds timeout = std::chrono::seconds(20)) {
        if (pid_ <= 0) return -1;
        kill(pid_, SIGTERM);
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        int status = 0;
        while (std::chrono::steady_clock::now() < deadline) {
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }

    // Resident memory of the server process, KiB.
    long rss_kib() const {
        std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
        }
        return -1;
    }

    struct Reply {
        int status = 0;
        nlohmann::json json;  // the body (non-streaming)
        std::string body;
    };
    Reply post(const std::string& path, const nlohmann::json& body,
               const std::string& api_key = "") const {
        return post_raw(path, body.dump(), api_key);
    }
    Reply post_raw(const std::string& path, const std::string& body,
                   const std::string& api_key = "") const {
        node::HttpRequest req;
        req.method = "POST";
        req.target = path;
        req.body = body;
        req.headers.emplace_back("Content-Type", "application/json");
        if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
        Reply r;
        auto resp = node::http_request(url_, req);
        if (!resp) {
            r.body = resp.error().message;
            return r;
        }
        r.status = resp->status;
        r.body = resp->body;
        r.json = nlohmann::json::parse(r.body, nullptr, false);
        return r;
    }
    Reply get(const std::string& path) const {
        node::HttpRequest req;
        req.target = path;
        Reply r;
        auto resp = node::http_request(url_, req);
        if (!resp) return r;
        r.status = resp->status;
        r.body = resp->body;
        r.json = nlohmann::json::parse(r.body, nullptr, false);
        return r;
    }

    // A streaming request, read by the harness's one SSE reader (tests/support/node_process).
    // `keep_reading(so_far)` returning false hangs up.
    StreamReply stream(const std::string& path, nlohmann::json body,
                       const std::function<bool(const StreamReply&)>& keep_reading = {}) const {
        return http_stream(url_, path, std::move(body), Millis(120'000), {}, keep_reading);
    }

private:
    TempDir dir_;
    std::filesystem::path log_path_;
    pid_t pid_ = -1;
    node::HttpUrl url_;
};

// The demo model's chat template applied to one user message (tokenizer_config.json).
inline std::string demo_prompt(const std::string& user) {
    return "<|bos|><|user|>\n" + user + "<|end|>\n<|assistant|>\n";
}

inline nlohmann::json chat_body(const std::string& user, int max_tokens) {
    return {{"model", "demo"},
            {"messages", {{{"role", "user"}, {"content", user}}}},
            {"temperature", 0},
            {"max_tokens", max_tokens}};
}

}  // namespace brigade::test
