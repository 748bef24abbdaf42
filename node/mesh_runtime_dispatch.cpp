// MeshRuntime frame dispatch: control frames feed the directory, membership and agreement;
// pipeline frames go to the PipelineHost.

#include "node/mesh_runtime_impl.hpp"

namespace brigade::node {
using mesh::Clock;

namespace {

// A frame naming another node than the link's peer, where it must name the sender.
bool names_other(const mesh::NodeId& claimed, const mesh::NodeId& from) { return claimed != from; }

}  // namespace

void MeshRuntime::Impl::on_frame(const std::shared_ptr<LinkSlot>& slot, mesh::Message message) {
    const mesh::NodeId from = slot->link->peer().id;
    const auto now = Clock::now();
    on_member_events(membership.on_heard(from, now));
    if (stopping) return;

    std::string bad;  // a frame that breaks the rules closes the link
    std::visit(
        [&](auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, mesh::Hello>) {
                bad = "a second Hello";
            } else if constexpr (std::is_same_v<T, mesh::Heartbeat> ||
                                 std::is_same_v<T, mesh::Bye>) {
                // Handled inside the link.
            } else if constexpr (std::is_same_v<T, mesh::PeerList>) {
                on_discovery(directory.on_gossip(from, m, now));
            } else if constexpr (std::is_same_v<T, mesh::CapacityReport>) {
                if (names_other(m.node_id, from)) {
                    bad = "a capacity report for another node";
                    return;
                }
                // The plan it serves: our proposals, should we coordinate, go above it.
                agreement.observe_serving_epoch(m.stage.epoch);
                on_member_events(membership.on_capacity(m, now));
                std::vector<mesh::PeerAddress> listen;
                for (const mesh::PeerInfo& p : directory.peer_list({}).peers) {
                    if (p.id == from) listen = p.addresses;
                }
                membership.set_addresses(from, std::move(listen));
            } else if constexpr (std::is_same_v<T, mesh::PlanPropose>) {
                run_actions(agreement.on_propose(from, m, now));
                agreement.observe_epoch(m.epoch);
            } else if constexpr (std::is_same_v<T, mesh::PlanAck>) {
                if (names_other(m.node_id, from)) {
                    bad = "a plan ack for another node";
                    return;
                }
                const bool refused = m.status == mesh::AckStatus::kStale ||
                                     m.status == mesh::AckStatus::kNotCoordinator;
                const bool was_in_flight = agreement.proposal_in_flight();
                run_actions(agreement.on_ack(from, m));
                // Refusals of a proposal already aborted (by the first refusal, which asked for
                // a retry at once) are not this case: taking them for it put off that retry.
                const bool of_active = agreement.active() && agreement.active()->epoch == m.epoch;
                if (refused && !was_in_flight && of_active && agreement.is_coordinator()) {
                    // It refused the committed plan we sent it when it joined (its view or
                    // epochs differed): propose again above every epoch seen.
                    force_propose = true;
                    mark_plan_dirty("member " + from.short_string() + " refused plan " +
                                    std::to_string(m.epoch));
                    plan_not_before = now + options.plan_retry;
                }
            } else if constexpr (std::is_same_v<T, mesh::PlanCommit>) {
                run_actions(agreement.on_commit(from, m));
            } else if constexpr (std::is_same_v<T, mesh::PlanAbort>) {
                run_actions(agreement.on_abort(from, m));
            } else if constexpr (std::is_same_v<T, mesh::RequestFrame>) {
                if (names_other(m.origin, from)) {
                    bad = "a request for another origin";
                    return;
                }
                host->on_pipeline_frame(from, std::move(message));
            } else {
                // ActivationFrame, TokenFrame, Cancel, ErrorFrame, RequestUpdate, KvPrefix.
                if constexpr (std::is_same_v<T, mesh::ErrorFrame>) {
                    if (m.request_id == 0) {
                        logger->warn("mesh peer {} reports: {}", from.short_string(), m.message);
                        return;
                    }
                }
                host->on_pipeline_frame(from, std::move(message));
            }
        },
        message);
    if (!bad.empty()) {
        logger->warn("mesh link to {} closed: protocol error: {}", from.short_string(), bad);
        slot->link->close("protocol error: " + bad);
    }
}

}  // namespace brigade::node
