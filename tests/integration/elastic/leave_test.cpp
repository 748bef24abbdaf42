// Graceful leave (issue 7): SIGTERM (or `brigade stop`, which sends it) on a stage node in the
// middle of two 200-token greedy generations. The node announces its departure, the mesh
// re-plans around it, the in-flight requests move to the new pipeline without an error, and the
// node exits by itself (code 0) within its drain time.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/elastic/disruption.hpp"

namespace brigade::test {
namespace {

const std::vector<std::string> kFourNodes(4, kThreeStageMemory);

// A node's own stop must not take longer than this (its --drain-ms is 10 s).
constexpr Seconds kLeaveBound{20};

class ElasticLeave : public ::testing::Test {
protected:
    void SetUp() override {
        ref_ = &long_reference();
        ASSERT_TRUE(ref_->error.empty()) << ref_->error;
        ASSERT_EQ(ref_->ids.size(), 200u) << "the reference ended early: " << ref_->text;
    }

    // SIGTERM on stage `stage` while requests entered at two other nodes run.
    void leave_during_generation(const std::string& name, std::size_t stage, Disrupt how) {
        auto spec = elastic_spec(name);
        spec.extra_args = {"--drain-ms", "10000"};
        ElasticMesh mesh(spec);
        ASSERT_EQ(mesh.start(kFourNodes, 3), "");
        NodeProcess* victim = mesh.stage_node(stage);
        ASSERT_NE(victim, nullptr) << mesh.view().dump();
        const std::vector<NodeProcess*> entries = mesh.live_nodes_except(victim);
        ASSERT_EQ(entries.size(), 3u);
        const auto epoch = mesh.epoch();
        const auto victim_id = mesh.id_of(victim);

        auto r = run_disruption(*victim, how, *entries[0], *entries[1]);
        const std::string what = "stage " + std::to_string(stage) + " left (" +
                                 (how == Disrupt::kStopCommand ? "brigade stop" : "SIGTERM") + ")";
        expect_both_streams_complete(r, *ref_, what, mesh.logs());
        if (how == Disrupt::kStopCommand) {
            EXPECT_EQ(r.stop_command.exit_code, 0)
                << r.stop_command.out << r.stop_command.err << "\n"
                << victim->logs();
            EXPECT_NE(r.stop_command.out.find("stopped after"), std::string::npos)
                << r.stop_command.out;
        }
        EXPECT_EQ(r.exit_code, 0) << what << ": the leaving node did not exit cleanly\n"
                                  << victim->logs();
        if (r.fired && r.exit_code >= 0) {
            EXPECT_LE(r.exited_at - r.fired_at, kLeaveBound) << what;
            report_figure("leave.stage" + std::to_string(stage) + ".exit_ms",
                          elapsed_ms_text(r.fired_at, r.exited_at));
        }
        EXPECT_EQ(wait_replanned_without(mesh, 3, 3, epoch, victim_id), "");
        report_recovery("leave.stage" + std::to_string(stage), r);
    }

    const Reference* ref_ = nullptr;
};

TEST_F(ElasticLeave, MiddleStageLeavesDuringGeneration) {
    leave_during_generation("lmid", 1, Disrupt::kTerminate);
}

// The head is stopped with `brigade stop`, as a person would: the command finds the node by
// its home and returns once it has left and exited.
TEST_F(ElasticLeave, HeadStageLeavesDuringGeneration) {
    leave_during_generation("lhead", 0, Disrupt::kStopCommand);
}

// Requests that arrive while a stage leaves (SIGTERM) are held and served on the next plan,
// none refused: the mesh re-plans around the leaving node before it goes.
TEST_F(ElasticLeave, RequestsArrivingDuringALeaveAreServed) {
    auto spec = elastic_spec("lheld");
    spec.extra_args = {"--drain-ms", "10000"};
    ElasticMesh mesh(spec);
    ASSERT_EQ(mesh.start(kFourNodes, 3), "");
    NodeProcess* victim = mesh.stage_node(1);
    ASSERT_NE(victim, nullptr) << mesh.view().dump();
    const std::vector<NodeProcess*> entries = mesh.live_nodes_except(victim);
    const auto epoch = mesh.epoch();
    const auto victim_id = mesh.id_of(victim);

    BackToBackLoad load(entries);
    ASSERT_EQ(load.error(), "");
    std::this_thread::sleep_for(Millis(300));
    const auto stopped_at = SteadyClock::now();
    const int code = victim->terminate(kLeaveBound);
    const auto replan_error = wait_replanned_without(mesh, 3, 3, epoch, victim_id);
    std::this_thread::sleep_for(Millis(300));
    load.stop();
    EXPECT_EQ(code, 0) << victim->logs();
    ASSERT_EQ(replan_error, "");
    const auto n = load.expect_all_served("requests during a leave", stopped_at);
    EXPECT_GE(n, 6u) << "too few requests to cover the leave";
}

}  // namespace
}  // namespace brigade::test
