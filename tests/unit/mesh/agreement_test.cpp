// Plan agreement between simulated nodes: messages are delivered by a tiny in-memory router.

#include "mesh/agreement.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace brigade::mesh {
namespace {

using namespace std::chrono_literals;
using Kind = AgreementAction::Kind;

NodeId id_of(std::uint8_t n) {
    NodeId id;
    id.bytes[0] = n;
    return id;
}

const Clock::time_point t0 = Clock::time_point{} + 1h;

PlanPropose plan_of(std::vector<std::pair<std::uint8_t, model::LayerRange>> stages) {
    PlanPropose p;
    p.model_id = "demo";
    for (auto [n, r] : stages) p.stages.push_back({id_of(n), r.first, r.last});
    return p;
}

// Nodes plus a message queue; records what each node was told to do.
struct Sim {
    std::map<NodeId, Agreement> nodes;
    std::deque<std::tuple<NodeId, NodeId, Message>> queue;   // from, to, message
    std::map<NodeId, std::vector<AgreementAction>> effects;  // non-message actions
    std::set<NodeId> down;

    explicit Sim(std::vector<std::uint8_t> ids) {
        std::vector<NodeId> all;
        for (auto n : ids) all.push_back(id_of(n));
        for (const NodeId& id : all) {
            nodes.emplace(id, Agreement(id, AgreementConfig{10s}));
            nodes.at(id).on_members(all);
        }
    }

    void apply(const NodeId& at, std::vector<AgreementAction> actions) {
        for (AgreementAction& a : actions) {
            if (a.kind == Kind::kSend) {
                queue.emplace_back(at, a.to, a.message);
            } else if (a.kind == Kind::kBroadcast) {
                for (auto& [id, _] : nodes)
                    if (id != at) queue.emplace_back(at, id, a.message);
            } else {
                effects[at].push_back(a);
            }
        }
    }

    void deliver_all(Clock::time_point now) {
        while (!queue.empty()) {
            auto [from, to, m] = queue.front();
            queue.pop_front();
            if (down.count(to) || down.count(from)) continue;
            Agreement& a = nodes.at(to);
            std::vector<AgreementAction> out;
            if (auto* p = std::get_if<PlanPropose>(&m)) out = a.on_propose(from, *p, now);
            if (auto* k = std::get_if<PlanAck>(&m)) out = a.on_ack(from, *k);
            if (auto* c = std::get_if<PlanCommit>(&m)) out = a.on_commit(from, *c);
            if (auto* x = std::get_if<PlanAbort>(&m)) out = a.on_abort(from, *x);
            apply(to, std::move(out));
        }
    }

    // Every node that was asked to load a stage reports `ok`.
    void finish_loads(bool ok = true) {
        for (auto& [id, acts] : effects) {
            for (const AgreementAction& a : acts) {
                if (a.kind == Kind::kLoadStage && !loaded.count({id, a.plan.epoch})) {
                    loaded.insert({id, a.plan.epoch});
                    apply(id,
                          nodes.at(id).on_local_ready(a.plan.epoch, ok, ok ? "" : "out of memory"));
                }
            }
        }
    }

    // Node `proposer` proposes `plan`, every stage loads it, and it commits.
    void commit(std::uint8_t proposer, const PlanPropose& plan) {
        apply(id_of(proposer), *nodes.at(id_of(proposer)).propose(plan, t0));
        deliver_all(t0);
        finish_loads();
        deliver_all(t0);
    }

    // Node `n` joins; every node's view becomes `members`. Returns the joiner.
    Agreement& join(std::uint8_t n, const std::vector<std::uint8_t>& members) {
        nodes.emplace(id_of(n), Agreement(id_of(n), AgreementConfig{10s}));
        std::vector<NodeId> view;
        for (auto m : members) view.push_back(id_of(m));
        for (auto& [id, a] : nodes) a.on_members(view);
        return nodes.at(id_of(n));
    }

    int count(const NodeId& id, Kind k) const {
        auto it = effects.find(id);
        if (it == effects.end()) return 0;
        return static_cast<int>(
            std::count_if(it->second.begin(), it->second.end(),
                          [&](const AgreementAction& a) { return a.kind == k; }));
    }

    std::set<std::pair<NodeId, std::uint64_t>> loaded;
};

TEST(Agreement, LowestAliveIdCoordinates) {
    Agreement a(id_of(5));
    EXPECT_TRUE(a.is_coordinator());
    a.on_members({id_of(9), id_of(5), id_of(3)});
    EXPECT_EQ(a.coordinator(), id_of(3));
    a.on_members({id_of(9), id_of(5)});
    EXPECT_EQ(a.coordinator(), id_of(5));
    EXPECT_TRUE(a.propose(plan_of({{5, {0, 4}}}), t0));
}

TEST(Agreement, ProposeLoadAckCommitEverywhere) {
    Sim sim({1, 2, 3});
    auto actions = sim.nodes.at(id_of(1)).propose(plan_of({{1, {0, 10}}, {2, {10, 24}}}), t0);
    ASSERT_TRUE(actions);
    sim.apply(id_of(1), *actions);
    sim.deliver_all(t0);
    // Stage nodes were asked to load; nothing committed yet.
    EXPECT_EQ(sim.count(id_of(1), Kind::kLoadStage), 1);
    EXPECT_EQ(sim.count(id_of(2), Kind::kLoadStage), 1);
    EXPECT_EQ(sim.count(id_of(3), Kind::kLoadStage), 0);
    EXPECT_EQ(sim.count(id_of(3), Kind::kActivate), 0);
    EXPECT_EQ(sim.effects[id_of(2)].front().range, (model::LayerRange{10, 24}));
    sim.finish_loads();
    sim.deliver_all(t0);
    for (std::uint8_t n : {1, 2, 3}) {
        EXPECT_EQ(sim.count(id_of(n), Kind::kActivate), 1) << int(n);
        ASSERT_TRUE(sim.nodes.at(id_of(n)).active());
        EXPECT_EQ(sim.nodes.at(id_of(n)).active()->epoch, 1u);
        EXPECT_FALSE(sim.nodes.at(id_of(n)).pending());
    }
}

TEST(Agreement, OldPlanServesUntilTheNewOneCommits) {
    Sim sim({1, 2});
    sim.apply(id_of(1), *sim.nodes.at(id_of(1)).propose(plan_of({{1, {0, 24}}}), t0));
    sim.deliver_all(t0);
    sim.finish_loads();
    sim.deliver_all(t0);
    ASSERT_EQ(sim.nodes.at(id_of(2)).active()->epoch, 1u);
    sim.apply(id_of(1),
              *sim.nodes.at(id_of(1)).propose(plan_of({{1, {0, 12}}, {2, {12, 24}}}), t0));
    sim.deliver_all(t0);
    // Loading: epoch 2 pending, epoch 1 still active everywhere.
    EXPECT_EQ(sim.nodes.at(id_of(2)).active()->epoch, 1u);
    EXPECT_EQ(sim.nodes.at(id_of(2)).pending()->epoch, 2u);
    sim.finish_loads();
    sim.deliver_all(t0);
    EXPECT_EQ(sim.nodes.at(id_of(2)).active()->epoch, 2u);
    EXPECT_EQ(sim.nodes.at(id_of(1)).active()->epoch, 2u);
}

TEST(Agreement, StaleEpochsAreRejected) {
    Agreement node(id_of(2));
    node.on_members({id_of(1), id_of(2)});
    PlanPropose p = plan_of({{2, {0, 4}}});
    p.coordinator = id_of(1);
    p.epoch = 5;
    auto ok = node.on_propose(id_of(1), p, t0);
    ASSERT_EQ(ok.size(), 1u);
    EXPECT_EQ(ok[0].kind, Kind::kLoadStage);
    for (std::uint64_t e : {5, 4, 1}) {
        p.epoch = e;
        auto r = node.on_propose(id_of(1), p, t0);
        ASSERT_EQ(r.size(), 1u);
        ASSERT_EQ(r[0].kind, Kind::kSend);
        const auto& ack = std::get<PlanAck>(r[0].message);
        EXPECT_EQ(ack.status, AckStatus::kStale);
        EXPECT_EQ(ack.highest_epoch, 5u);
    }
    // A commit for an epoch it did not accept is ignored.
    EXPECT_TRUE(node.on_commit(id_of(1), PlanCommit{4, id_of(1)}).empty());
    EXPECT_FALSE(node.active());
}

// A buggy peer's epoch of 2^64 - 1 (in an ack, a capacity report or a proposal) is neither
// adopted nor accepted, so the next proposal does not wrap to 0 and commits.
TEST(Agreement, EpochsPastTheRangeAreIgnoredAndRefused) {
    Sim sim({1, 2});
    sim.commit(1, plan_of({{1, {0, 24}}}));
    Agreement& coordinator = sim.nodes.at(id_of(1));
    const std::uint64_t wild = ~std::uint64_t{0};
    coordinator.observe_epoch(wild);
    coordinator.observe_serving_epoch(wild);
    EXPECT_TRUE(
        coordinator.on_ack(id_of(2), PlanAck{7, id_of(2), AckStatus::kStale, wild, ""}).empty());
    EXPECT_EQ(coordinator.highest_epoch(), 1u);
    sim.commit(1, plan_of({{2, {0, 24}}}));
    for (std::uint8_t n : {1, 2}) {
        ASSERT_TRUE(sim.nodes.at(id_of(n)).active()) << int(n);
        EXPECT_EQ(sim.nodes.at(id_of(n)).active()->epoch, 2u) << int(n);
    }

    Agreement& member = sim.nodes.at(id_of(2));
    PlanPropose p = plan_of({{2, {0, 24}}});
    p.coordinator = id_of(1);
    p.epoch = wild;
    auto refused = member.on_propose(id_of(1), p, t0);
    ASSERT_EQ(refused.size(), 1u);
    ASSERT_EQ(refused[0].kind, Kind::kSend);
    EXPECT_EQ(std::get<PlanAck>(refused[0].message).status, AckStatus::kStale);
    EXPECT_EQ(member.highest_epoch(), 2u);
    EXPECT_FALSE(member.pending());
}

TEST(Agreement, OnlyTheCoordinatorMayPropose) {
    Agreement node(id_of(3));
    node.on_members({id_of(1), id_of(2), id_of(3)});
    PlanPropose p = plan_of({{3, {0, 4}}});
    p.coordinator = id_of(2);
    p.epoch = 1;
    auto r = node.on_propose(id_of(2), p, t0);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(std::get<PlanAck>(r[0].message).status, AckStatus::kNotCoordinator);
    auto own = node.propose(plan_of({{3, {0, 4}}}), t0);
    ASSERT_FALSE(own);
    EXPECT_EQ(own.error().code, errc::not_coordinator);
    // A proposal whose claimed coordinator is not its sender is refused too.
    p.coordinator = id_of(1);
    EXPECT_EQ(std::get<PlanAck>(node.on_propose(id_of(2), p, t0)[0].message).status,
              AckStatus::kNotCoordinator);
}

TEST(Agreement, StaleCoordinatorComingBackCannotImposeAnOldPlan) {
    Sim sim({1, 2, 3});
    // Epoch 1 by node 1.
    sim.apply(id_of(1),
              *sim.nodes.at(id_of(1)).propose(plan_of({{1, {0, 12}}, {2, {12, 24}}}), t0));
    sim.deliver_all(t0);
    sim.finish_loads();
    sim.deliver_all(t0);
    // Node 1 vanishes; node 2 takes over and commits epoch 2 without it.
    sim.down.insert(id_of(1));
    for (std::uint8_t n : {2, 3})
        sim.apply(id_of(n), sim.nodes.at(id_of(n)).on_members({id_of(2), id_of(3)}));
    ASSERT_TRUE(sim.nodes.at(id_of(2)).is_coordinator());
    sim.apply(id_of(2),
              *sim.nodes.at(id_of(2)).propose(plan_of({{2, {0, 12}}, {3, {12, 24}}}), t0));
    sim.deliver_all(t0);
    sim.finish_loads();
    sim.deliver_all(t0);
    ASSERT_EQ(sim.nodes.at(id_of(3)).active()->epoch, 2u);
    // Node 1 returns, still believing epoch 1 and that it coordinates. Its view has everyone.
    sim.down.erase(id_of(1));
    for (std::uint8_t n : {2, 3})
        sim.apply(id_of(n), sim.nodes.at(id_of(n)).on_members({id_of(1), id_of(2), id_of(3)}));
    Agreement& old = sim.nodes.at(id_of(1));
    // Its next proposal uses its old counter (epoch 2): rejected as stale, and it learns epoch 2.
    sim.apply(id_of(1), *old.propose(plan_of({{1, {0, 24}}}), t0));
    sim.deliver_all(t0);
    EXPECT_EQ(sim.count(id_of(1), Kind::kProposalFailed), 1);
    EXPECT_EQ(sim.nodes.at(id_of(3)).active()->epoch, 2u);
    EXPECT_EQ(sim.nodes.at(id_of(2)).active()->epoch, 2u);
    EXPECT_GE(old.highest_epoch(), 2u);
    // Re-sending its old plan (epoch 1) and its commit changes nothing either.
    PlanPropose stale = *old.active();
    ASSERT_EQ(stale.epoch, 1u);
    sim.queue.emplace_back(id_of(1), id_of(3), stale);
    sim.queue.emplace_back(id_of(1), id_of(3), PlanCommit{1, id_of(1)});
    sim.deliver_all(t0);
    EXPECT_EQ(sim.nodes.at(id_of(3)).active()->epoch, 2u);
    // Having caught up, a fresh proposal goes above every epoch and commits everywhere.
    sim.apply(id_of(1), *old.propose(plan_of({{1, {0, 24}}}), t0));
    sim.deliver_all(t0);
    sim.finish_loads();
    sim.deliver_all(t0);
    EXPECT_GT(sim.nodes.at(id_of(3)).active()->epoch, 2u);
    EXPECT_EQ(sim.nodes.at(id_of(3)).active()->coordinator, id_of(1));
}

TEST(Agreement, FailedLoadAbortsAndKeepsTheActivePlan) {
    Sim sim({1, 2});
    sim.apply(id_of(1),
              *sim.nodes.at(id_of(1)).propose(plan_of({{1, {0, 12}}, {2, {12, 24}}}), t0));
    sim.deliver_all(t0);
    sim.finish_loads(false);
    sim.deliver_all(t0);
    EXPECT_EQ(sim.count(id_of(1), Kind::kProposalFailed), 1);
    EXPECT_EQ(sim.count(id_of(2), Kind::kDropPending), 1);
    EXPECT_FALSE(sim.nodes.at(id_of(2)).pending());
    EXPECT_FALSE(sim.nodes.at(id_of(2)).active());
}

TEST(Agreement, AckTimeoutAborts) {
    Sim sim({1, 2});
    sim.apply(id_of(1),
              *sim.nodes.at(id_of(1)).propose(plan_of({{1, {0, 12}}, {2, {12, 24}}}), t0));
    sim.deliver_all(t0);
    EXPECT_TRUE(sim.nodes.at(id_of(1)).tick(t0 + 9s).empty());
    auto out = sim.nodes.at(id_of(1)).tick(t0 + 10s);
    sim.apply(id_of(1), out);
    sim.deliver_all(t0 + 10s);
    EXPECT_EQ(sim.count(id_of(1), Kind::kProposalFailed), 1);
    EXPECT_NE(sim.effects[id_of(1)].back().reason.find("timed out"), std::string::npos);
    EXPECT_FALSE(sim.nodes.at(id_of(2)).pending());
}

TEST(Agreement, LosingAStageNodeAbortsTheProposal) {
    Sim sim({1, 2, 3});
    sim.apply(id_of(1),
              *sim.nodes.at(id_of(1)).propose(plan_of({{2, {0, 12}}, {3, {12, 24}}}), t0));
    sim.deliver_all(t0);
    sim.apply(id_of(1), sim.nodes.at(id_of(1)).on_members({id_of(1), id_of(2)}));
    EXPECT_EQ(sim.count(id_of(1), Kind::kProposalFailed), 1);
    EXPECT_FALSE(sim.nodes.at(id_of(1)).proposal_in_flight());
    // The members already show the node gone: the next proposal need not wait.
    EXPECT_TRUE(sim.effects[id_of(1)].back().retry_now) << sim.effects[id_of(1)].back().reason;
}

TEST(Agreement, ParticipantDropsAProposalWhoseCoordinatorDied) {
    Sim sim({1, 2});
    sim.apply(id_of(1), *sim.nodes.at(id_of(1)).propose(plan_of({{2, {0, 24}}}), t0));
    sim.deliver_all(t0);
    ASSERT_TRUE(sim.nodes.at(id_of(2)).pending());
    auto out = sim.nodes.at(id_of(2)).on_members({id_of(2)});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind, Kind::kDropPending);
    EXPECT_FALSE(sim.nodes.at(id_of(2)).pending());
}

TEST(Agreement, JoinerLearnsTheActivePlan) {
    Sim sim({1, 2});
    sim.commit(1, plan_of({{1, {0, 24}}}));
    // Node 4 joins (higher id, so node 1 still coordinates).
    sim.join(4, {1, 2, 4});
    sim.apply(id_of(1), sim.nodes.at(id_of(1)).on_peer_joined(id_of(4)));
    sim.deliver_all(t0);
    ASSERT_TRUE(sim.nodes.at(id_of(4)).active());
    EXPECT_EQ(sim.nodes.at(id_of(4)).active()->epoch, 1u);
    EXPECT_EQ(sim.count(id_of(4), Kind::kLoadStage), 0);
}

// A stage node of the active plan that links again is not sent that plan and its commit: a
// restarted one would take the commit while still loading its stage, and serve nothing. The
// restart re-plans instead, and that plan commits with the new run's stage loaded.
TEST(Agreement, RestartedStageNodeIsNotSentTheActivePlan) {
    Sim sim({1, 2});
    sim.commit(1, plan_of({{1, {0, 12}}, {2, {12, 24}}}));
    ASSERT_EQ(sim.nodes.at(id_of(2)).active()->epoch, 1u);
    // Node 2's process restarts: a fresh agreement with the same id.
    sim.nodes.erase(id_of(2));
    sim.effects.erase(id_of(2));
    sim.loaded.clear();
    sim.join(2, {1, 2});
    EXPECT_TRUE(sim.nodes.at(id_of(1)).on_peer_joined(id_of(2)).empty());
    // A node not in the plan still learns it.
    sim.join(4, {1, 2, 4});
    sim.apply(id_of(1), sim.nodes.at(id_of(1)).on_peer_joined(id_of(4)));
    sim.deliver_all(t0);
    ASSERT_TRUE(sim.nodes.at(id_of(4)).active());
    EXPECT_FALSE(sim.nodes.at(id_of(2)).active());
    EXPECT_EQ(sim.count(id_of(2), Kind::kActivate), 0);
    // The re-plan: node 2 loads its range for the new epoch, then activates it.
    sim.commit(1, plan_of({{1, {0, 12}}, {2, {12, 24}}}));
    ASSERT_TRUE(sim.nodes.at(id_of(2)).active());
    EXPECT_EQ(sim.nodes.at(id_of(2)).active()->epoch, 2u);
    EXPECT_EQ(sim.count(id_of(2), Kind::kLoadStage), 1);
    EXPECT_EQ(sim.count(id_of(2), Kind::kActivate), 1);
}

// A joiner with the lowest id coordinates at once. Capacity reports tell it which epoch the
// mesh serves, so its first proposal goes above it and commits, with no refused round.
TEST(Agreement, JoinerThatCoordinatesProposesAboveTheServedEpoch) {
    Sim sim({2, 3});
    for (int round = 0; round < 3; ++round) sim.commit(2, plan_of({{2, {0, 24}}}));
    ASSERT_EQ(sim.nodes.at(id_of(3)).active()->epoch, 3u);
    Agreement& joiner = sim.join(1, {1, 2, 3});
    ASSERT_TRUE(joiner.is_coordinator());
    joiner.observe_serving_epoch(3);
    joiner.observe_serving_epoch(0);  // a spare node serves nothing
    sim.commit(1, plan_of({{1, {0, 24}}}));
    EXPECT_EQ(sim.count(id_of(1), Kind::kProposalFailed), 0);
    for (std::uint8_t n : {1, 2, 3}) {
        ASSERT_TRUE(sim.nodes.at(id_of(n)).active()) << int(n);
        EXPECT_EQ(sim.nodes.at(id_of(n)).active()->epoch, 4u) << int(n);
    }
}

// Without that knowledge the first proposal is refused as stale; the refusal carries the epoch
// that beat it, so the coordinator is told to propose again at once, and that proposal commits.
// Other failures keep the retry delay.
TEST(Agreement, AStaleRefusalAsksForAnImmediateRetry) {
    auto failures = [](Sim& sim, std::uint8_t n) {
        std::vector<AgreementAction> out;
        for (const AgreementAction& a : sim.effects[id_of(n)]) {
            if (a.kind == Kind::kProposalFailed) out.push_back(a);
        }
        return out;
    };
    Sim sim({2, 3});
    sim.commit(2, plan_of({{2, {0, 24}}}));
    sim.join(1, {1, 2, 3});
    sim.commit(1, plan_of({{1, {0, 24}}}));
    const auto refused = failures(sim, 1);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_TRUE(refused[0].retry_now) << refused[0].reason;
    sim.commit(1, plan_of({{1, {0, 24}}}));
    EXPECT_EQ(sim.nodes.at(id_of(3)).active()->coordinator, id_of(1));

    // A failed load is not cured by proposing again at once.
    Sim other({1, 2});
    other.apply(id_of(1), *other.nodes.at(id_of(1)).propose(plan_of({{2, {0, 24}}}), t0));
    other.deliver_all(t0);
    other.finish_loads(false);
    other.deliver_all(t0);
    const auto failed = failures(other, 1);
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_FALSE(failed[0].retry_now) << failed[0].reason;
}

// A serving epoch heard of is not an epoch seen: the committed plan of that epoch, sent to a
// joiner that is not the coordinator, is still accepted.
TEST(Agreement, ServingEpochDoesNotBlockTheCommittedPlan) {
    Sim sim({1, 2});
    sim.commit(1, plan_of({{1, {0, 24}}}));
    sim.join(4, {1, 2, 4}).observe_serving_epoch(1);
    sim.apply(id_of(1), sim.nodes.at(id_of(1)).on_peer_joined(id_of(4)));
    sim.deliver_all(t0);
    ASSERT_TRUE(sim.nodes.at(id_of(4)).active());
    EXPECT_EQ(sim.nodes.at(id_of(4)).active()->epoch, 1u);
}

}  // namespace
}  // namespace brigade::mesh
