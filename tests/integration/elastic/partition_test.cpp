// A cut link (issue 7, "cable pulled"): four nodes in four network namespaces on one bridge
// (three stages and a spare). In the middle of two 200-token greedy generations the middle
// stage's veth is set down on the bridge side: its packets vanish, nothing is closed. The others
// must declare it dead within the membership timeout, re-plan over the spare and finish both
// requests with the text of an uninterrupted run. When the link is healed the node rejoins the
// mesh. Needs root for the namespaces; skips, saying why, where they cannot be made.
#include <gtest/gtest.h>

#include "tests/integration/elastic/disruption.hpp"
#include "tests/support/netns_lan.hpp"

namespace brigade::test {
namespace {

TEST(ElasticPartition, CutLinkIsACrashAndTheHealedNodeRejoins) {
    NetnsLan lan(4, "be", 78);
    if (!lan.skip_reason().empty()) GTEST_SKIP() << lan.skip_reason();
    ASSERT_TRUE(lan.ok()) << lan.error();
    const auto& ref = long_reference();
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    ASSERT_EQ(ref.ids.size(), 200u) << "the reference ended early: " << ref.text;

    auto spec = elastic_spec("cut");
    spec.netns_of = [&](std::size_t i) { return lan.ns(i); };
    spec.address_of = [&](std::size_t i) { return lan.address(i); };
    spec.discovery = true;
    ElasticMesh mesh(spec);
    ASSERT_EQ(mesh.start(std::vector<std::string>(4, kThreeStageMemory), 3), "");
    NodeProcess* head = mesh.stage_node(0);
    NodeProcess* victim = mesh.stage_node(1);
    NodeProcess* tail = mesh.stage_node(2);
    ASSERT_TRUE(head && victim && tail) << mesh.view().dump();
    const auto epoch = mesh.epoch();
    const auto victim_id = mesh.id_of(victim);
    const auto victim_index = mesh.index_of(victim);

    bool cut = false;
    auto r = run_disruption(*victim, Disrupt::kCustom, *head, *tail,
                            [&] { cut = lan.cut(victim_index); });
    ASSERT_TRUE(cut) << lan.error();
    mesh.set_reachable(victim, false);
    expect_both_streams_complete(r, ref, "middle stage cut off", mesh.logs());
    ASSERT_EQ(wait_replanned_without(mesh, 3, 3, epoch, victim_id), "");
    EXPECT_TRUE(victim->running()) << "the cut-off node died\n" << victim->logs();
    report_recovery("partition.middle", r);
    const auto replanned_epoch = mesh.epoch();

    // Heal: the node is linked again, every node (it too) lists four members and agrees on one
    // plan at or above the survivors' epoch.
    ASSERT_TRUE(lan.heal(victim_index)) << lan.error();
    const auto healed_at = SteadyClock::now();
    mesh.set_reachable(victim, true);
    ASSERT_EQ(mesh.wait_plan(
                  4, 3,
                  [&](const nlohmann::json& v) {
                      return v["plan"]["epoch"].get<std::int64_t>() >= replanned_epoch;
                  },
                  Millis(45'000)),
              "");
    report_figure("partition.heal_to_rejoined_ms", elapsed_ms_text(healed_at, SteadyClock::now()));
    const auto& short_ref =
        cached_reference(demo_model_dir(), demo_chat_prompt(kShortUsers[0]), 32, kDemoVocab);
    ASSERT_TRUE(short_ref.error.empty()) << short_ref.error;
    EXPECT_EQ(completion_text(victim->post("/v1/completions",
                                           completion_body(demo_chat_prompt(kShortUsers[0]), 32))),
              short_ref.text)
        << "the rejoined node does not serve\n"
        << victim->logs();
}

}  // namespace
}  // namespace brigade::test
