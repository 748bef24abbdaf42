// A node joins while requests stream (issue 7, "Join"): three nodes of 2.6 MB serve the demo
// model over three stages; a node of 16 MB, which holds the whole model alone, joins. The
// planner prefers one stage on it, the mesh switches between tokens, and no request fails,
// changes its text or stalls; the new plan is in /v1/mesh with a higher epoch.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "tests/integration/elastic/disruption.hpp"

namespace brigade::test {
namespace {

// The longest silence a stream may see across the switch: one token's time plus the switch
// (the new stage is loaded before the commit, so the switch is a re-prefill, not a load).
// Generous for a 2-core machine shared with builds, and well below a crash's recovery.
constexpr Millis kMaxStall{3000};

struct LoadResult {
    std::string what;
    WatchedStream stream;
    const Reference* ref = nullptr;
};

Millis longest_gap(const WatchedStream& s) {
    Millis gap{0};
    auto prev = s.started;
    for (auto t : s.arrivals) {
        gap = std::max(gap, std::chrono::duration_cast<Millis>(t - prev));
        prev = t;
    }
    return gap;
}

TEST(ElasticJoin, NodeJoinsDuringAStreamOfRequestsNoneFails) {
    std::vector<const Reference*> refs;
    for (const auto& user : kShortUsers) {
        refs.push_back(&cached_reference(demo_model_dir(), demo_chat_prompt(user), 32, kDemoVocab));
        ASSERT_TRUE(refs.back()->error.empty()) << refs.back()->error;
    }
    const auto& long_ref = long_reference();
    ASSERT_TRUE(long_ref.error.empty()) << long_ref.error;

    ElasticMesh mesh(elastic_spec("join"));
    ASSERT_EQ(mesh.start(std::vector<std::string>(3, kThreeStageMemory), 3), "");
    const auto epoch = mesh.epoch();
    std::vector<NodeProcess*> entries = mesh.live_nodes();
    auto home = mesh.new_home();
    ASSERT_TRUE(home.has_value());

    // Load: every original node takes a loop of short streams; one long stream spans the join.
    std::atomic<bool> stop{false};
    std::mutex results_mutex;
    std::vector<LoadResult> results;
    std::vector<std::thread> clients;
    for (std::size_t c = 0; c < entries.size(); ++c) {
        clients.emplace_back([&, c] {
            for (std::size_t i = 0; !stop; ++i) {
                const std::size_t k = (c + i) % kShortUsers.size();
                LoadResult r;
                r.what = entries[c]->name() + " request " + std::to_string(i);
                r.ref = refs[k];
                r.stream = watched_stream(entries[c]->url(), "/v1/completions",
                                          completion_body(demo_chat_prompt(kShortUsers[k]), 32), {},
                                          Millis(60'000));
                std::lock_guard lock(results_mutex);
                results.push_back(std::move(r));
            }
        });
    }
    LoadResult long_run;
    long_run.what = "long stream across the join";
    long_run.ref = &long_ref;
    std::thread long_client([&] {
        long_run.stream = watched_stream(entries[0]->url(), "/v1/chat/completions",
                                         long_chat_body(), {}, Millis(60'000));
    });
    std::this_thread::sleep_for(Millis(300));

    const auto join_started = SteadyClock::now();
    NodeProcess* joiner = mesh.add_node(kWholeModelMemory, 4, home);
    const auto joiner_ready = SteadyClock::now();
    std::optional<SteadyClock::time_point> in_plan_at;
    if (joiner != nullptr) {
        wait_until(
            [&] {
                const auto v = mesh_view(*entries[0]);
                if (plan_stage_count(v) == 1 && v["plan"]["stages"][0]["node"] == home->id) {
                    in_plan_at = SteadyClock::now();
                }
                return in_plan_at.has_value();
            },
            Millis(30'000), Millis(20));
    }
    // Keep the load on across and after the switch.
    std::this_thread::sleep_for(Millis(1000));
    stop = true;
    for (auto& t : clients) t.join();
    long_client.join();

    ASSERT_NE(joiner, nullptr) << mesh.error();
    ASSERT_TRUE(in_plan_at.has_value())
        << "the joiner never took the plan: " << mesh_view(*entries[0]).dump() << "\n"
        << mesh.logs();
    report_figure("join.spawn_to_ready_ms", elapsed_ms_text(join_started, joiner_ready));
    report_figure("join.spawn_to_in_plan_ms", elapsed_ms_text(join_started, *in_plan_at));

    ASSERT_EQ(mesh.wait_plan(4, 1,
                             [&](const nlohmann::json& v) {
                                 return v["plan"]["epoch"].get<std::int64_t>() > epoch &&
                                        v["plan"]["stages"][0]["node"] == home->id;
                             }),
              "");

    results.push_back(std::move(long_run));
    std::size_t failed = 0;
    Millis worst{0};
    std::size_t across = 0;  // requests that were running when the plan switched
    for (const auto& r : results) {
        const auto& s = r.stream;
        const bool ok = s.status == 200 && s.errors.empty() && s.done && s.content == r.ref->text;
        if (!ok) ++failed;
        EXPECT_TRUE(ok) << r.what << ": status " << s.status << " " << s.error_body
                        << (s.errors.empty() ? "" : " error event " + s.errors.front())
                        << "\n got: " << s.content << "\nwant: " << r.ref->text;
        worst = std::max(worst, longest_gap(s));
        if (s.started < *in_plan_at && s.ended > *in_plan_at) ++across;
    }
    EXPECT_LE(worst, kMaxStall) << "a stream stalled across the switch";
    EXPECT_GE(results.size(), 6u) << "too little load to say anything";
    report_figure("join.requests", std::to_string(results.size()));
    report_figure("join.requests_across_switch", std::to_string(across));
    report_figure("join.failed_requests", std::to_string(failed));
    report_figure("join.longest_stream_gap_ms", std::to_string(worst.count()));
    if (failed > 0) std::printf("%s\n", mesh.logs().c_str());

    // The new node serves requests that enter at it, and the old nodes keep routing.
    EXPECT_EQ(completion_text(joiner->post("/v1/completions",
                                           completion_body(demo_chat_prompt(kShortUsers[0]), 32))),
              refs[0]->text);
    EXPECT_EQ(completion_text(entries[1]->post(
                  "/v1/completions", completion_body(demo_chat_prompt(kShortUsers[1]), 32))),
              refs[1]->text);
}

// A node that crashed comes back with the same identity and no --expect-nodes: it is ready
// (port file, "ready" line) only once it can answer requests, so the first requests sent to it
// must be served. It must not answer from a view of the mesh it has not finished joining (for
// example "the mesh cannot hold the model" computed from the one peer it has linked to so far).
TEST(ElasticJoin, RestartedNodeServesAsSoonAsItIsReady) {
    ElasticMesh mesh(elastic_spec("rejoin"));
    ASSERT_EQ(mesh.start(std::vector<std::string>(4, kThreeStageMemory), 3), "");
    NodeProcess* victim = mesh.stage_node(1);
    ASSERT_NE(victim, nullptr) << mesh.view().dump();
    const auto home = mesh.home_of(victim);
    const auto epoch = mesh.epoch();
    victim->kill_now();
    ASSERT_EQ(wait_replanned_without(mesh, 3, 3, epoch, home.id), "");

    const auto restarted_at = SteadyClock::now();
    NodeProcess* back = mesh.add_node(kThreeStageMemory, 0, home);
    ASSERT_NE(back, nullptr) << mesh.error();
    report_figure("join.restart_to_ready_ms", elapsed_ms_text(restarted_at, SteadyClock::now()));
    std::vector<NodeProcess*> entries = {back};
    BackToBackLoad load(entries);
    ASSERT_EQ(load.error(), "");
    std::this_thread::sleep_for(Millis(1500));
    load.stop();
    const auto n = load.expect_all_served("requests at the restarted node", restarted_at);
    EXPECT_GE(n, 3u);
    EXPECT_EQ(mesh.wait_plan(4, 3), "");
}

// A joiner whose id is the lowest becomes the coordinator as soon as it links. Its first
// proposal must already go above the epoch the mesh serves (the members' capacity reports carry
// it): proposing epoch 1 was refused by every member as stale and cost the retry delay (1.5 s)
// before the plan moved onto it.
TEST(ElasticJoin, JoinerThatBecomesCoordinatorIsNotRefusedAsStale) {
    ElasticMesh mesh(elastic_spec("coordinator-join"));
    // The members' ids start at "8" or above (3 in 4 random ids do) and the joiner's below it (1
    // in 4), so a joiner below every member is found within a few tries. Searching below the
    // lowest of three random ids failed in CI when that id began "04": then 1 id in 250 is below.
    const std::string split = "8";
    for (int i = 0; i < 3; ++i) {
        const auto member = mesh.new_home(split);
        ASSERT_TRUE(member.has_value()) << "no identity above " << split;
        ASSERT_NE(mesh.add_node(kThreeStageMemory, 3, member), nullptr) << mesh.error();
    }
    ASSERT_EQ(mesh.wait_plan(3, 3), "");
    const auto epoch = mesh.epoch();
    const auto home = mesh.new_home_below(split);
    ASSERT_TRUE(home.has_value()) << "no identity below " << split;
    NodeProcess* joiner = mesh.add_node(kWholeModelMemory, 0, home);
    ASSERT_NE(joiner, nullptr) << mesh.error();
    ASSERT_EQ(mesh.wait_plan(4, 1,
                             [&](const nlohmann::json& v) {
                                 return v["coordinator"] == home->id &&
                                        v["plan"]["stages"][0]["node"] == home->id;
                             }),
              "");
    EXPECT_GT(mesh.epoch(), epoch);
    const std::string log = joiner->logs(1 << 20);
    EXPECT_EQ(log.find("has seen epoch"), std::string::npos) << log;
}

}  // namespace
}  // namespace brigade::test
