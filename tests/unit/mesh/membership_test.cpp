// Peer table timing rules with a fake clock.

#include "mesh/membership.hpp"

#include <gtest/gtest.h>

namespace brigade::mesh {
namespace {

using namespace std::chrono_literals;

NodeId id_of(std::uint8_t n) {
    NodeId id;
    id.bytes[0] = n;
    return id;
}

const Clock::time_point t0 = Clock::time_point{} + 1h;

TEST(Membership, DefaultsAreStated) {
    const MembershipConfig c;
    EXPECT_EQ(c.heartbeat_interval, 1000ms);
    EXPECT_EQ(c.suspect_after, 2500ms);
    EXPECT_EQ(c.dead_after, 6000ms);
}

TEST(Membership, JoinSuspectRecoverDie) {
    Membership m(id_of(1));
    EXPECT_EQ(m.on_heard(id_of(2), t0),
              (std::vector<MemberEvent>{{MemberEventKind::kJoined, id_of(2)}}));
    EXPECT_TRUE(m.on_heard(id_of(2), t0 + 500ms).empty());
    EXPECT_TRUE(m.tick(t0 + 2900ms).empty());  // heard at 500 ms: not yet 2500 ms silent
    EXPECT_EQ(m.tick(t0 + 3000ms),
              (std::vector<MemberEvent>{{MemberEventKind::kSuspect, id_of(2)}}));
    EXPECT_TRUE(m.tick(t0 + 3100ms).empty());  // reported once
    EXPECT_EQ(m.alive_ids(), (std::vector<NodeId>{id_of(1)}));
    EXPECT_EQ(m.member_ids(), (std::vector<NodeId>{id_of(1), id_of(2)}));
    EXPECT_EQ(m.on_heard(id_of(2), t0 + 3200ms),
              (std::vector<MemberEvent>{{MemberEventKind::kRecovered, id_of(2)}}));
    EXPECT_EQ(m.alive_ids(), (std::vector<NodeId>{id_of(1), id_of(2)}));
    // Silent from 3200 ms: suspect at 5700, dead (and gone) at 9200.
    EXPECT_EQ(m.tick(t0 + 5700ms).size(), 1u);
    EXPECT_EQ(m.tick(t0 + 9200ms), (std::vector<MemberEvent>{{MemberEventKind::kDead, id_of(2)}}));
    EXPECT_EQ(m.find(id_of(2)), nullptr);
    EXPECT_EQ(m.size(), 1u);
    // Coming back after death is a fresh join.
    EXPECT_EQ(m.on_heard(id_of(2), t0 + 10s).front().kind, MemberEventKind::kJoined);
}

TEST(Membership, ADeadNodeLeavesEvenIfNeverSuspectedInATick) {
    // The driver may tick late (e.g. a busy loop): one tick past dead_after removes it at once.
    Membership m(id_of(1));
    m.on_heard(id_of(3), t0);
    EXPECT_EQ(m.tick(t0 + 1min), (std::vector<MemberEvent>{{MemberEventKind::kDead, id_of(3)}}));
}

TEST(Membership, ByeRemovesAtOnce) {
    Membership m(id_of(1));
    m.on_heard(id_of(2), t0);
    EXPECT_EQ(m.on_left(id_of(2)), (std::vector<MemberEvent>{{MemberEventKind::kLeft, id_of(2)}}));
    EXPECT_TRUE(m.on_left(id_of(2)).empty());
    EXPECT_EQ(m.size(), 1u);
}

TEST(Membership, ConfigurableTimings) {
    Membership m(id_of(1), MembershipConfig{100ms, 200ms, 500ms});
    m.on_heard(id_of(2), t0);
    EXPECT_EQ(m.tick(t0 + 200ms).size(), 1u);
    EXPECT_EQ(m.tick(t0 + 500ms).front().kind, MemberEventKind::kDead);
}

TEST(Membership, CapacityReportsAreKeptWithRtts) {
    Membership m(id_of(1));
    CapacityReport r{id_of(2), 6000000, "cpu", "demo", 0.001, {LinkMeasurement{id_of(1), 420, 0}},
                     {},       0};
    auto ev = m.on_capacity(r, t0);
    ASSERT_EQ(ev.size(), 2u);  // joined + capacity
    EXPECT_EQ(ev[1].kind, MemberEventKind::kCapacityChanged);
    const Member* mem = m.find(id_of(2));
    ASSERT_NE(mem, nullptr);
    EXPECT_EQ(mem->capacity->memory_bytes, 6000000u);
    EXPECT_EQ(mem->rtt_us_to_peers.at(id_of(1)), 420u);
    EXPECT_TRUE(m.on_capacity(r, t0 + 1s).empty());  // unchanged report: no event
    // A report about ourselves sets our own capacity.
    m.on_capacity(CapacityReport{id_of(1), 7, "cuda", "demo", 0.5, {}, {}, 0}, t0);
    ASSERT_TRUE(m.self_capacity());
    EXPECT_EQ(m.self_capacity()->backend, "cuda");
}

TEST(Membership, SelfIsAlwaysAMemberAndNeverAnEvent) {
    Membership m(id_of(5));
    EXPECT_TRUE(m.on_heard(id_of(5), t0).empty());
    m.on_heard(id_of(9), t0);
    m.on_heard(id_of(2), t0);
    EXPECT_EQ(m.member_ids(), (std::vector<NodeId>{id_of(2), id_of(5), id_of(9)}));
    EXPECT_TRUE(m.tick(t0 + 1h).size() == 2u);
    EXPECT_EQ(m.member_ids(), (std::vector<NodeId>{id_of(5)}));
}

TEST(Membership, NextDeadlineTellsTheDriverWhenToTick) {
    Membership m(id_of(1));
    EXPECT_FALSE(m.next_deadline());
    m.on_heard(id_of(2), t0);
    EXPECT_EQ(*m.next_deadline(), t0 + 2500ms);
    m.tick(t0 + 2500ms);
    EXPECT_EQ(*m.next_deadline(), t0 + 6000ms);
}

}  // namespace
}  // namespace brigade::mesh
