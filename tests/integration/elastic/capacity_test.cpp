// When the survivors cannot hold the model (issue 7): three nodes of 2.6 MB need all three
// stages, so killing one leaves a mesh that can serve nothing. Requests must then get a clear
// 503 quickly (never hang), and serving must resume by itself once the node is back.
#include <gtest/gtest.h>

#include "tests/integration/elastic/disruption.hpp"

namespace brigade::test {
namespace {

// A refused request must be answered within this (it is a 503, not a wait for capacity).
constexpr Millis kQuick503{3000};
// An in-flight stream must end this soon after its stage died: the death is known within
// --dead-after, then the planner knows at once that nothing fits.
constexpr Millis kInFlightEnds{kDeadAfterMs + 5000};

bool mentions_capacity(const std::string& text) {
    for (const char* word : {"hold", "fit", "memory", "capacity"}) {
        if (text.find(word) != std::string::npos) return true;
    }
    return false;
}

TEST(ElasticCapacity, SurvivorsThatCannotHoldTheModelAnswer503UntilCapacityReturns) {
    const auto& ref =
        cached_reference(demo_model_dir(), demo_chat_prompt(kShortUsers[0]), 32, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    const auto& long_ref = long_reference();
    ASSERT_TRUE(long_ref.error.empty()) << long_ref.error;

    ElasticMesh mesh(elastic_spec("cap"));
    ASSERT_EQ(mesh.start(std::vector<std::string>(3, kThreeStageMemory), 3), "");
    NodeProcess* head = mesh.stage_node(0);
    NodeProcess* victim = mesh.stage_node(2);
    ASSERT_TRUE(head && victim) << mesh.view().dump();
    auto victim_home = mesh.home_of(victim);
    const auto body = completion_body(demo_chat_prompt(kShortUsers[0]), 32);

    // A generation in flight when the tail dies ends (with an error event) instead of hanging;
    // the text it did send is the reference's beginning. The tail is killed when the client
    // has read kDisruptAtChunk pieces of text; a client held up long enough (a loaded CI
    // machine) reads them after the node has sent the whole text, and then no generation was
    // in flight. That attempt says nothing, so the tail comes back and the stream runs again.
    SteadyClock::time_point killed_at;
    WatchedStream s;
    for (int attempt = 1;; ++attempt) {
        bool killed = false;
        s = watched_stream(head->url(), "/v1/completions", long_completion_body(),
                           [&](std::size_t n) {
                               if (n != kDisruptAtChunk || killed) return;
                               ::kill(victim->pid(), SIGKILL);
                               killed_at = SteadyClock::now();
                               killed = true;
                           });
        victim->kill_now();
        ASSERT_TRUE(killed) << "the stream ended before the kill\n" << mesh.logs();
        const bool finished_before_the_kill =
            s.status == 200 && s.errors.empty() && s.done && s.content == long_ref.text;
        if (!finished_before_the_kill) break;
        std::printf("attempt %d: the node had sent the whole text before the kill; again\n",
                    attempt);
        ASSERT_LT(attempt, 3) << "in " << attempt
                              << " attempts the node sent the whole text before the kill";
        const auto epoch = mesh.epoch();
        ASSERT_NE(mesh.add_node(kThreeStageMemory, 3, victim_home), nullptr) << mesh.error();
        ASSERT_EQ(mesh.wait_plan(3, 3,
                                 [&](const nlohmann::json& v) {
                                     return v["plan"]["epoch"].get<std::int64_t>() > epoch;
                                 }),
                  "");
        head = mesh.stage_node(0);
        victim = mesh.stage_node(2);
        ASSERT_TRUE(head && victim) << mesh.view().dump();
        victim_home = mesh.home_of(victim);
    }
    EXPECT_LE(s.ended - killed_at, kInFlightEnds)
        << "the in-flight request lingered " << elapsed_ms_text(killed_at, s.ended);
    EXPECT_TRUE(s.status != 200 || !s.errors.empty())
        << "the stream ended without saying why: " << s.content;
    EXPECT_EQ(long_ref.text.substr(0, s.content.size()), s.content);
    report_figure("no_capacity.in_flight_ends_ms", elapsed_ms_text(killed_at, s.ended));

    // The survivors learn that they cannot hold the model soon after the death (the planner
    // answers at once); from then on every request is refused with that reason, fast.
    nlohmann::json view;
    const bool knows = wait_until(
        [&] {
            view = mesh_view(*head);
            return view.is_object() && view.contains("nodes") && view["nodes"].size() == 2 &&
                   view["unavailable"].is_string() &&
                   mentions_capacity(view["unavailable"].get<std::string>());
        },
        std::chrono::duration_cast<Millis>(kInFlightEnds - (SteadyClock::now() - killed_at)),
        Millis(50));
    ASSERT_TRUE(knows) << "within " << kInFlightEnds.count()
                       << " ms of the kill the head does not say that the model does not fit: "
                       << view.dump() << "\n"
                       << mesh.logs();
    report_figure("no_capacity.kill_to_no_fit_ms", elapsed_ms_text(killed_at, SteadyClock::now()));
    for (NodeProcess* entry : mesh.live_nodes()) {
        const auto start = SteadyClock::now();
        auto r = entry->post("/v1/completions", body);
        const auto took = SteadyClock::now() - start;
        EXPECT_EQ(r.status, 503) << entry->name() << ": " << r.body;
        EXPECT_LE(took, kQuick503)
            << entry->name() << " took " << elapsed_ms_text(start, start + took);
        ASSERT_TRUE(r.json.is_object() && r.json.contains("error")) << r.body;
        const auto message = r.json["error"].value("message", "");
        EXPECT_TRUE(mentions_capacity(message)) << "503 without a clear reason: " << r.body;
        // Streaming requests are refused the same way, before any event.
        auto st = http_stream(entry->url(), "/v1/completions", body, Millis(10'000));
        EXPECT_EQ(st.status, 503) << entry->name() << ": " << st.error_body;
    }

    // The node comes back (same identity): the mesh plans again and serves, with nobody
    // touching the survivors. Until then requests keep getting quick 503s, never a hang.
    const auto back_at = SteadyClock::now();
    ASSERT_NE(mesh.add_node(kThreeStageMemory, 3, victim_home), nullptr) << mesh.error();
    HttpReply served;
    const bool ok = wait_until(
        [&] {
            const auto start = SteadyClock::now();
            served = head->post("/v1/completions", body);
            EXPECT_LE(SteadyClock::now() - start, Millis(30'000)) << "a request hung";
            if (served.status != 200) {
                EXPECT_EQ(served.status, 503) << served.body;
            }
            return served.status == 200;
        },
        Millis(60'000), Millis(250));
    ASSERT_TRUE(ok) << "serving did not resume: " << served.body << "\n" << mesh.logs();
    report_figure("no_capacity.node_back_to_served_ms",
                  elapsed_ms_text(back_at, SteadyClock::now()));
    EXPECT_EQ(completion_text(served), ref.text);
    ASSERT_EQ(mesh.wait_plan(3, 3), "");
    for (NodeProcess* entry : mesh.live_nodes()) {
        EXPECT_EQ(completion_text(entry->post("/v1/completions", body)), ref.text)
            << "at " << entry->name();
    }
}

}  // namespace
}  // namespace brigade::test
