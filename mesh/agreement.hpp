#pragma once
// Plan agreement, sans-io (PROTOCOL.md §6). Inputs are messages, membership views, local "stage
// loaded" reports and clock ticks; outputs are actions for the driver (send, broadcast, load a
// stage, activate a plan, drop a pending one).
//
// - The coordinator is the lowest node id among alive members: no election messages, and every
//   node with the same view picks the same one.
// - The coordinator proposes with epoch = (highest epoch it has seen) + 1. A node accepts a
//   proposal only from the node it considers coordinator and only with an epoch above every epoch
//   it has seen; otherwise it answers with a rejection carrying its highest epoch, so a stale
//   coordinator that comes back learns it and cannot impose an old plan.
// - Each stage node loads its range (`kLoadStage`) while the active plan keeps serving, then acks
//   ready. When every stage node is ready the coordinator broadcasts PlanCommit and every node
//   switches (`kActivate`). A failed load, a lost stage node or a timeout aborts the proposal;
//   the active plan stays.

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mesh/errors.hpp"
#include "mesh/membership.hpp"
#include "mesh/messages.hpp"
#include "model/types.hpp"

namespace brigade::mesh {

struct AgreementConfig {
    Millis ack_timeout{120000};  // stages may need minutes to map their weights
};

struct AgreementAction {
    enum class Kind {
        kSend,            // send `message` to `to`
        kBroadcast,       // send `message` to every other member
        kLoadStage,       // load `range` for `plan` (epoch plan.epoch); report with on_local_ready
        kActivate,        // `plan` is committed: route through it from now on
        kDropPending,     // forget the pending `plan` (aborted or superseded); unload its stage
        kProposalFailed,  // coordinator: our proposal failed (`reason`); re-plan later
    };
    Kind kind;
    NodeId to;
    Message message;
    PlanPropose plan;
    model::LayerRange range;
    std::string reason;
    // kProposalFailed: what failed it is already settled, so a new proposal can go at once
    // instead of after the retry delay: its epoch was stale and the epoch that beat it is now
    // known, or one of its stage nodes left and the members show it gone.
    bool retry_now = false;
};

const char* agreement_action_name(AgreementAction::Kind k);

// Epochs come from authenticated peers, but a buggy one could still send 2^64 - 1, and the next
// proposal (the highest epoch seen + 1) would wrap to 0 and lose to every plan. No honest mesh
// gets near 2^62 (a plan a microsecond for 146,000 years), so larger epochs are ignored when
// observed and refused when proposed.
inline constexpr std::uint64_t kMaxPlanEpoch = std::uint64_t{1} << 62;

class Agreement {
public:
    Agreement(NodeId self, AgreementConfig config = {});

    // The alive member ids (self included). Aborts work that depended on a member now gone.
    std::vector<AgreementAction> on_members(const std::vector<NodeId>& alive);
    NodeId coordinator() const;
    bool is_coordinator() const { return coordinator() == self_; }

    // Coordinator only: proposes `plan` (its epoch and coordinator fields are filled in here).
    Result<std::vector<AgreementAction>> propose(PlanPropose plan, Clock::time_point now);
    // Coordinator: bring a node that just joined up to date with the active plan (not a stage
    // node of it: see agreement.cpp).
    std::vector<AgreementAction> on_peer_joined(const NodeId& id);

    std::vector<AgreementAction> on_propose(const NodeId& from, const PlanPropose& p,
                                            Clock::time_point now);
    // This node finished (ok) or failed loading its range for `epoch`.
    std::vector<AgreementAction> on_local_ready(std::uint64_t epoch, bool ok,
                                                const std::string& message);
    std::vector<AgreementAction> on_ack(const NodeId& from, const PlanAck& ack);
    std::vector<AgreementAction> on_commit(const NodeId& from, const PlanCommit& c);
    std::vector<AgreementAction> on_abort(const NodeId& from, const PlanAbort& a);
    std::vector<AgreementAction> tick(Clock::time_point now);
    // An epoch seen elsewhere (e.g. in a peer's ack): proposals must go above it. Epochs past
    // kMaxPlanEpoch are ignored here and refused in proposals (see there).
    void observe_epoch(std::uint64_t epoch);
    // The epoch a member reports serving (its capacity report). Our proposals go above it, but
    // unlike observe_epoch it does not count as seen: that plan itself, sent to us as the
    // committed plan when we join, is still accepted. A joiner that becomes coordinator (it has
    // the lowest id) learns the mesh's epoch this way before its first proposal, which would
    // otherwise start at 1 and be refused as stale.
    void observe_serving_epoch(std::uint64_t epoch);

    const std::optional<PlanPropose>& active() const { return active_; }
    const std::optional<PlanPropose>& pending() const { return pending_; }
    std::uint64_t highest_epoch() const { return highest_epoch_; }
    bool proposal_in_flight() const { return in_flight_.has_value(); }

private:
    struct InFlight {
        PlanPropose plan;
        std::set<NodeId> waiting;  // stage nodes not yet ready
        Clock::time_point deadline;
    };

    std::vector<AgreementAction> accept(const PlanPropose& p, Clock::time_point now);
    std::vector<AgreementAction> abort_in_flight(const std::string& reason, bool retry_now = false);
    std::vector<AgreementAction> commit_local(std::uint64_t epoch);
    void send_or_local(std::vector<AgreementAction>& out, const NodeId& to, Message m);

    NodeId self_;
    AgreementConfig config_;
    std::vector<NodeId> alive_;  // sorted
    std::uint64_t highest_epoch_ = 0;
    std::uint64_t serving_epoch_ = 0;  // the highest epoch a member reported serving
    std::optional<PlanPropose> active_;
    std::optional<PlanPropose> pending_;  // accepted, loading or waiting for commit
    Clock::time_point pending_since_{};
    std::optional<InFlight> in_flight_;  // coordinator's own proposal
};

}  // namespace brigade::mesh
