#pragma once
// One scenario shared by the crash, leave and partition tests: two 200-token greedy streams
// enter at two nodes that survive; when the first has received `at_chunk` pieces of text, a
// stage is taken away (kill -9, SIGTERM, or a cut link). Both streams must then finish with the
// text of an uninterrupted run, and the mesh must show a newer plan without the victim.

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "tests/integration/elastic/elastic_mesh.hpp"

namespace brigade::test {

// kStopCommand: `brigade stop` with the victim's BRIGADE_HOME (SIGTERM found by its record).
enum class Disrupt { kKill, kTerminate, kStopCommand, kCustom };

struct DisruptionResult {
    WatchedStream first;   // /v1/completions at the first entry node
    WatchedStream second;  // /v1/chat/completions at the second entry node
    bool fired = false;    // the victim was hit while the first stream ran
    SteadyClock::time_point fired_at;
    int exit_code = -2;                 // kTerminate, kStopCommand: the victim's exit code
    SteadyClock::time_point exited_at;  // kTerminate, kStopCommand: when it had exited
    CommandResult stop_command;         // kStopCommand: what `brigade stop` said
};

inline constexpr std::size_t kDisruptAtChunk = 12;

// `custom` is what kCustom does (e.g. cut a link); it runs on the first stream's thread.
inline DisruptionResult run_disruption(NodeProcess& victim, Disrupt how, NodeProcess& entry_a,
                                       NodeProcess& entry_b,
                                       const std::function<void()>& custom = {}) {
    DisruptionResult r;
    std::thread terminator;
    std::thread second([&] {
        r.second = watched_stream(entry_b.url(), "/v1/chat/completions", long_chat_body(), {});
    });
    // Let the second request be admitted before the first starts, so both are in flight.
    std::this_thread::sleep_for(Millis(50));
    r.first = watched_stream(
        entry_a.url(), "/v1/completions", long_completion_body(), [&](std::size_t n) {
            if (n != kDisruptAtChunk || r.fired) return;
            r.fired_at = SteadyClock::now();
            r.fired = true;
            switch (how) {
                case Disrupt::kKill:
                    ::kill(victim.pid(), SIGKILL);
                    break;
                case Disrupt::kTerminate:
                    terminator = std::thread([&] {
                        r.exit_code = victim.terminate(Seconds(30));
                        r.exited_at = SteadyClock::now();
                    });
                    break;
                case Disrupt::kStopCommand:
                    terminator = std::thread([&] {
                        r.stop_command =
                            run_brigade_env({"stop", "--timeout", "30"},
                                            {{"BRIGADE_HOME", victim.home().string()}}, 40);
                        // It returns once the node has exited.
                        r.exited_at = SteadyClock::now();
                        r.exit_code = victim.terminate(Seconds(5));
                    });
                    break;
                case Disrupt::kCustom:
                    if (custom) custom();
                    break;
            }
        });
    second.join();
    if (terminator.joinable()) terminator.join();
    if (how == Disrupt::kKill) victim.kill_now();  // reap it
    return r;
}

// The checks every scenario shares: both streams complete and equal the reference.
inline void expect_both_streams_complete(const DisruptionResult& r, const Reference& ref,
                                         const std::string& what, const std::string& logs) {
    ASSERT_TRUE(r.fired) << what << ": the stream ended before the disruption point ("
                         << r.first.arrivals.size() << " chunks, status " << r.first.status << ", "
                         << r.first.error_body << ")\n"
                         << logs;
    expect_complete_stream(r.first, ref, what + ", completions stream", logs);
    expect_complete_stream(r.second, ref, what + ", chat stream", logs);
}

// The plan after the disruption: `n_nodes` members, `stages` stages, a higher epoch than
// `old_epoch`, and `gone_id` in no stage.
inline std::string wait_replanned_without(ElasticMesh& mesh, std::size_t n_nodes,
                                          std::size_t stages, std::int64_t old_epoch,
                                          const std::string& gone_id,
                                          Millis timeout = Millis(30'000)) {
    return mesh.wait_plan(
        n_nodes, stages,
        [&](const nlohmann::json& v) {
            if (v["plan"]["epoch"].get<std::int64_t>() <= old_epoch) return false;
            for (const auto& s : v["plan"]["stages"]) {
                if (s["node"] == gone_id) return false;
            }
            for (const auto& n : v["nodes"]) {
                if (n["id"] == gone_id) return false;
            }
            return true;
        },
        timeout);
}

// Short greedy requests sent back to back by one client per entry node until stop(): what a
// busy mesh sees while it re-plans. Every reply must be the reference text (none refused).
class BackToBackLoad {
public:
    static constexpr int kTokens = 8;

    BackToBackLoad(const std::vector<NodeProcess*>& entries) {
        for (const auto& user : kShortUsers) {
            refs_.push_back(
                &cached_reference(demo_model_dir(), demo_chat_prompt(user), kTokens, kDemoVocab));
        }
        for (const auto* ref : refs_) {
            if (!ref->error.empty()) error_ = ref->error;
        }
        if (!error_.empty()) return;
        for (std::size_t c = 0; c < entries.size(); ++c) {
            NodeProcess* entry = entries[c];
            clients_.emplace_back([this, entry, c] {
                for (std::size_t i = 0; i < 2000 && !stop_; ++i) {
                    Sent s;
                    s.user = (c + i) % kShortUsers.size();
                    s.what = entry->name() + " request " + std::to_string(i);
                    s.at = SteadyClock::now();
                    s.reply = entry->post(
                        "/v1/completions",
                        completion_body(demo_chat_prompt(kShortUsers[s.user]), kTokens));
                    std::lock_guard lock(mutex_);
                    sent_.push_back(std::move(s));
                }
            });
        }
    }
    ~BackToBackLoad() { stop(); }
    BackToBackLoad(const BackToBackLoad&) = delete;
    BackToBackLoad& operator=(const BackToBackLoad&) = delete;

    const std::string& error() const { return error_; }
    void stop() {
        stop_ = true;
        for (auto& t : clients_) {
            if (t.joinable()) t.join();
        }
    }
    // After stop(): every request succeeded with its reference text; returns how many were sent
    // after `since`.
    std::size_t expect_all_served(const std::string& what, SteadyClock::time_point since) {
        std::size_t refused = 0;
        std::size_t wrong = 0;
        std::size_t after = 0;
        std::string examples;
        for (const auto& s : sent_) {
            if (s.at >= since) ++after;
            const auto& j = s.reply.json;
            const bool ok = s.reply.status == 200 && j.is_object() && j.contains("choices") &&
                            j["choices"].is_array() && !j["choices"].empty() &&
                            j["choices"][0].value("text", std::string()) == refs_[s.user]->text;
            if (s.reply.status != 200) {
                ++refused;
            } else if (!ok) {
                ++wrong;
            }
            if (!ok && refused + wrong <= 4) {
                examples.append("\n  ").append(s.what).append(": ");
                examples.append(std::to_string(s.reply.status)).append(" ");
                examples.append(s.reply.body.substr(0, 400)).append("\n    want: ");
                examples.append(refs_[s.user]->text);
            }
        }
        EXPECT_EQ(refused + wrong, 0u)
            << what << ": of " << sent_.size() << " requests " << refused << " were refused and "
            << wrong << " had another text; the first:" << examples;
        return after;
    }

private:
    struct Sent {
        std::string what;
        std::size_t user = 0;
        SteadyClock::time_point at;
        HttpReply reply;
    };
    std::vector<const Reference*> refs_;
    std::vector<std::thread> clients_;
    std::mutex mutex_;
    std::vector<Sent> sent_;
    std::atomic<bool> stop_{false};
    std::string error_;
};

// Prints a figure for bench/RESULTS.md and records it in the test's XML output.
inline void report_figure(const std::string& key, const std::string& value) {
    std::printf("[elastic figure] %s = %s\n", key.c_str(), value.c_str());
    std::fflush(stdout);
    ::testing::Test::RecordProperty(key, value);
}

inline void report_recovery(const std::string& key, const DisruptionResult& r) {
    if (!r.fired) return;
    const auto a = first_token_after_gap(r.first, r.fired_at);
    const auto b = first_token_after_gap(r.second, r.fired_at);
    report_figure(key + ".completions_first_token_ms", a ? std::to_string(a->count()) : "none");
    report_figure(key + ".chat_first_token_ms", b ? std::to_string(b->count()) : "none");
}

}  // namespace brigade::test
