#include "mesh/agreement.hpp"

#include <algorithm>

namespace brigade::mesh {
namespace {

AgreementAction send_action(const NodeId& to, Message m) {
    AgreementAction a{AgreementAction::Kind::kSend, to, std::move(m), {}, {}, {}};
    return a;
}

AgreementAction broadcast_action(Message m) {
    AgreementAction a{AgreementAction::Kind::kBroadcast, {}, std::move(m), {}, {}, {}};
    return a;
}

AgreementAction plan_action(AgreementAction::Kind kind, const PlanPropose& p,
                            std::string reason = {}) {
    AgreementAction a{kind, {}, Message{Bye{}}, p, {}, std::move(reason)};
    return a;
}

}  // namespace

const char* agreement_action_name(AgreementAction::Kind k) {
    switch (k) {
        case AgreementAction::Kind::kSend:
            return "send";
        case AgreementAction::Kind::kBroadcast:
            return "broadcast";
        case AgreementAction::Kind::kLoadStage:
            return "load-stage";
        case AgreementAction::Kind::kActivate:
            return "activate";
        case AgreementAction::Kind::kDropPending:
            return "drop-pending";
        case AgreementAction::Kind::kProposalFailed:
            return "proposal-failed";
    }
    return "?";
}

Agreement::Agreement(NodeId self, AgreementConfig config) : self_(self), config_(config) {
    alive_.push_back(self_);
}

NodeId Agreement::coordinator() const { return alive_.front(); }

void Agreement::observe_epoch(std::uint64_t epoch) {
    if (epoch <= kMaxPlanEpoch) highest_epoch_ = std::max(highest_epoch_, epoch);
}

void Agreement::observe_serving_epoch(std::uint64_t epoch) {
    if (epoch <= kMaxPlanEpoch) serving_epoch_ = std::max(serving_epoch_, epoch);
}

std::vector<AgreementAction> Agreement::on_members(const std::vector<NodeId>& alive) {
    alive_ = alive;
    if (std::find(alive_.begin(), alive_.end(), self_) == alive_.end()) alive_.push_back(self_);
    std::sort(alive_.begin(), alive_.end());
    alive_.erase(std::unique(alive_.begin(), alive_.end()), alive_.end());
    std::vector<AgreementAction> out;
    auto is_alive = [&](const NodeId& id) {
        return std::binary_search(alive_.begin(), alive_.end(), id);
    };
    if (in_flight_) {
        for (const StageAssignment& s : in_flight_->plan.stages) {
            if (!is_alive(s.node)) {
                return abort_in_flight("stage node " + s.node.short_string() + " left the mesh",
                                       true);
            }
        }
    }
    if (pending_ && pending_->coordinator != self_ && !is_alive(pending_->coordinator)) {
        // The proposer died before committing: forget its proposal, keep serving the active plan.
        out.push_back(
            plan_action(AgreementAction::Kind::kDropPending, *pending_,
                        "coordinator " + pending_->coordinator.short_string() + " is gone"));
        pending_.reset();
    }
    return out;
}

void Agreement::send_or_local(std::vector<AgreementAction>& out, const NodeId& to, Message m) {
    if (to != self_) {
        out.push_back(send_action(to, std::move(m)));
        return;
    }
    // A message to ourselves is handled at once (the coordinator is also a stage).
    if (auto* ack = std::get_if<PlanAck>(&m)) {
        auto more = on_ack(self_, *ack);
        out.insert(out.end(), std::make_move_iterator(more.begin()),
                   std::make_move_iterator(more.end()));
    }
}

Result<std::vector<AgreementAction>> Agreement::propose(PlanPropose plan, Clock::time_point now) {
    if (!is_coordinator()) {
        return make_error(errc::not_coordinator,
                          "only the coordinator (" + coordinator().short_string() + ") proposes");
    }
    if (plan.stages.empty()) return make_error(errc::invalid_argument, "a plan needs stages");
    std::vector<AgreementAction> out;
    if (in_flight_) {
        auto aborted = abort_in_flight("superseded by a newer proposal");
        out.insert(out.end(), aborted.begin(), aborted.end());
    }
    plan.epoch = std::max(highest_epoch_, serving_epoch_) + 1;
    plan.coordinator = self_;
    InFlight f;
    f.plan = plan;
    for (const StageAssignment& s : plan.stages) f.waiting.insert(s.node);
    f.deadline = now + config_.ack_timeout;
    in_flight_ = std::move(f);
    out.push_back(broadcast_action(plan));
    auto local = accept(plan, now);
    out.insert(out.end(), local.begin(), local.end());
    return out;
}

std::vector<AgreementAction> Agreement::on_peer_joined(const NodeId& id) {
    if (!is_coordinator() || !active_ || id == self_) return {};
    // A stage node of the active plan that links again either still serves it (its link only
    // dropped) or was restarted and has no stage loaded: the plan and an immediate commit would
    // have it activate a stage it is still loading. A restart re-plans instead (PROTOCOL.md §6).
    for (const StageAssignment& s : active_->stages) {
        if (s.node == id) return {};
    }
    std::vector<AgreementAction> out;
    out.push_back(send_action(id, *active_));
    out.push_back(send_action(id, PlanCommit{active_->epoch, active_->coordinator}));
    return out;
}

std::vector<AgreementAction> Agreement::accept(const PlanPropose& p, Clock::time_point now) {
    std::vector<AgreementAction> out;
    highest_epoch_ = std::max(highest_epoch_, p.epoch);
    if (pending_ && pending_->epoch != p.epoch) {
        out.push_back(plan_action(AgreementAction::Kind::kDropPending, *pending_, "superseded"));
    }
    pending_ = p;
    pending_since_ = now;
    for (const StageAssignment& s : p.stages) {
        if (s.node == self_) {
            AgreementAction a = plan_action(AgreementAction::Kind::kLoadStage, p);
            a.range = {s.first_layer, s.last_layer};
            out.push_back(std::move(a));
        }
    }
    return out;
}

std::vector<AgreementAction> Agreement::on_propose(const NodeId& from, const PlanPropose& p,
                                                   Clock::time_point now) {
    std::vector<AgreementAction> out;
    if (from == self_) return out;
    auto reject = [&](AckStatus status, std::string why) {
        out.push_back(
            send_action(from, PlanAck{p.epoch, self_, status, highest_epoch_, std::move(why)}));
        return out;
    };
    if (p.coordinator != from)
        return reject(AckStatus::kNotCoordinator, "proposer/coordinator mismatch");
    // A committed plan sent to a joiner carries an epoch it has not seen, so it passes this check.
    if (from != coordinator()) {
        return reject(AckStatus::kNotCoordinator,
                      "coordinator here is " + coordinator().short_string());
    }
    if (p.epoch <= highest_epoch_) {
        return reject(AckStatus::kStale,
                      "epoch " + std::to_string(p.epoch) + " <= " + std::to_string(highest_epoch_));
    }
    if (p.epoch > kMaxPlanEpoch) {
        return reject(AckStatus::kStale, "epoch " + std::to_string(p.epoch) + " is out of range");
    }
    for (const StageAssignment& s : p.stages) {
        if (s.first_layer < 0 || s.last_layer <= s.first_layer) {
            return reject(AckStatus::kLoadFailed, "plan has an empty or negative layer range");
        }
    }
    return accept(p, now);
}

std::vector<AgreementAction> Agreement::on_local_ready(std::uint64_t epoch, bool ok,
                                                       const std::string& message) {
    std::vector<AgreementAction> out;
    if (!pending_ || pending_->epoch != epoch) return out;  // superseded meanwhile
    PlanAck ack{epoch, self_, ok ? AckStatus::kReady : AckStatus::kLoadFailed, highest_epoch_,
                message};
    send_or_local(out, pending_->coordinator, ack);
    return out;
}

std::vector<AgreementAction> Agreement::on_ack(const NodeId& from, const PlanAck& ack) {
    observe_epoch(ack.highest_epoch);
    if (!in_flight_ || ack.epoch != in_flight_->plan.epoch || ack.node_id != from) return {};
    switch (ack.status) {
        case AckStatus::kReady: {
            in_flight_->waiting.erase(from);
            if (!in_flight_->waiting.empty()) return {};
            const std::uint64_t epoch = in_flight_->plan.epoch;
            std::vector<AgreementAction> out;
            out.push_back(broadcast_action(PlanCommit{epoch, self_}));
            auto local = commit_local(epoch);
            out.insert(out.end(), local.begin(), local.end());
            in_flight_.reset();
            return out;
        }
        case AckStatus::kLoadFailed:
            return abort_in_flight("node " + from.short_string() +
                                   " failed to load: " + ack.message);
        case AckStatus::kStale:
            // observe_epoch above has the epoch that beat ours: the next proposal clears it.
            return abort_in_flight("node " + from.short_string() + " has seen epoch " +
                                       std::to_string(ack.highest_epoch),
                                   true);
        case AckStatus::kNotCoordinator:
            return abort_in_flight("node " + from.short_string() +
                                   " does not see us as coordinator: " + ack.message);
    }
    return {};
}

std::vector<AgreementAction> Agreement::commit_local(std::uint64_t epoch) {
    std::vector<AgreementAction> out;
    if (!pending_ || pending_->epoch != epoch) return out;
    active_ = std::move(pending_);
    pending_.reset();
    out.push_back(plan_action(AgreementAction::Kind::kActivate, *active_));
    return out;
}

std::vector<AgreementAction> Agreement::on_commit(const NodeId& from, const PlanCommit& c) {
    if (!pending_ || pending_->epoch != c.epoch || pending_->coordinator != from ||
        c.coordinator != from) {
        return {};  // a commit for something we did not accept: stale or forged, ignored
    }
    return commit_local(c.epoch);
}

std::vector<AgreementAction> Agreement::on_abort(const NodeId& from, const PlanAbort& a) {
    std::vector<AgreementAction> out;
    if (pending_ && pending_->epoch == a.epoch && pending_->coordinator == from) {
        out.push_back(plan_action(AgreementAction::Kind::kDropPending, *pending_, a.reason));
        pending_.reset();
    }
    return out;
}

std::vector<AgreementAction> Agreement::abort_in_flight(const std::string& reason, bool retry_now) {
    std::vector<AgreementAction> out;
    if (!in_flight_) return out;
    const PlanPropose plan = in_flight_->plan;
    in_flight_.reset();
    out.push_back(broadcast_action(PlanAbort{plan.epoch, self_, reason}));
    if (pending_ && pending_->epoch == plan.epoch) {
        out.push_back(plan_action(AgreementAction::Kind::kDropPending, *pending_, reason));
        pending_.reset();
    }
    out.push_back(plan_action(AgreementAction::Kind::kProposalFailed, plan, reason));
    out.back().retry_now = retry_now;
    return out;
}

std::vector<AgreementAction> Agreement::tick(Clock::time_point now) {
    std::vector<AgreementAction> out;
    if (in_flight_ && now >= in_flight_->deadline) {
        std::string who;
        for (const NodeId& id : in_flight_->waiting)
            who += (who.empty() ? "" : ", ") + id.short_string();
        return abort_in_flight("timed out waiting for " + who);
    }
    // A participant whose coordinator never commits (e.g. it was partitioned away) gives up after
    // twice the ack timeout, keeping the active plan.
    if (pending_ && pending_->coordinator != self_ &&
        now - pending_since_ >= 2 * config_.ack_timeout) {
        out.push_back(
            plan_action(AgreementAction::Kind::kDropPending, *pending_, "no commit in time"));
        pending_.reset();
    }
    return out;
}

}  // namespace brigade::mesh
