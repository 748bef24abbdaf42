// MeshRuntime planning: plan over the alive members once membership settles, propose as the
// coordinator, load stages on the loader thread, activate committed plans.

#include <boost/asio/post.hpp>

#include "node/mesh_runtime_impl.hpp"

namespace brigade::node {
using mesh::Clock;

namespace {

std::string describe_stages(const std::vector<mesh::StageAssignment>& stages) {
    std::string out;
    for (const mesh::StageAssignment& s : stages) {
        if (!out.empty()) out += ", ";
        out += s.node.short_string() + " [" + std::to_string(s.first_layer) + "," +
               std::to_string(s.last_layer) + ")";
    }
    return out;
}

std::vector<mesh::StageAssignment> assignments_of(const mesh::Plan& plan) {
    std::vector<mesh::StageAssignment> out;
    for (const mesh::PlannedStage& s : plan.stages) {
        out.push_back({s.node, s.layers.first, s.layers.last});
    }
    return out;
}

}  // namespace

void MeshRuntime::Impl::mark_plan_dirty(const std::string& why) {
    if (!plan_dirty) logger->debug("mesh: re-plan needed ({})", why);
    // The debounce counts from the last change: membership must be quiet for a moment.
    dirty_since = Clock::now();
    plan_dirty = true;
}

bool MeshRuntime::Impl::members_see_each_other() const {
    const std::vector<mesh::NodeId> alive = membership.alive_ids();
    // Before this node's first planning (it just started or restarted), a member linked to a
    // node we have not met yet means our view is partial (we linked to one peer first): a plan
    // now could find "no fit" among too few nodes, or leave the others out. Later, such links
    // are more likely stale (a peer that just died, still listed in a capacity report a moment
    // old), and waiting on them would only slow the re-plan.
    if (!first_plan_done && nodes_known_only_by_hearsay() > 0) return false;
    for (const mesh::NodeId& id : alive) {
        std::set<mesh::NodeId> reached;
        if (id == key.id()) {
            for (const auto& [peer, slot] : links) {
                if (slot->link->is_open()) reached.insert(peer);
            }
        } else if (const mesh::Member* m = membership.find(id); m && m->capacity) {
            for (const mesh::LinkMeasurement& l : m->capacity->links) reached.insert(l.peer);
        } else {
            return false;
        }
        for (const mesh::NodeId& other : alive) {
            if (other != id && reached.count(other) == 0) return false;
        }
    }
    return true;
}

std::size_t MeshRuntime::Impl::nodes_known_only_by_hearsay() const {
    const std::vector<mesh::NodeId> known = membership.member_ids();
    const std::set<mesh::NodeId> known_set(known.begin(), known.end());
    std::set<mesh::NodeId> unlinked;
    for (const mesh::NodeId& id : membership.alive_ids()) {
        const mesh::Member* m = membership.find(id);
        if (id == key.id() || m == nullptr || !m->capacity) continue;
        for (const mesh::LinkMeasurement& l : m->capacity->links) {
            if (known_set.count(l.peer) == 0) unlinked.insert(l.peer);
        }
    }
    return unlinked.size();
}

bool MeshRuntime::Impl::hold_partial_no_fit(Clock::time_point now) {
    // Only a node that has not served yet: it just started and has linked to some of the mesh.
    // "No fit" over that part would be answered with 503s (and the node would announce itself
    // ready) while the rest of the mesh, and its plan, are a link away. Later, a member's link
    // to a node we do not know is more likely one to a node that just died.
    if (is_settled.load()) return false;
    const std::size_t unlinked = nodes_known_only_by_hearsay();
    if (unlinked == 0) return false;
    if (!partial_view_since) partial_view_since = now;
    if (now - *partial_view_since >= options.partial_view_limit) {
        logger->warn("no link within {} ms to {} node(s) that members link to; planning without",
                     options.partial_view_limit.count(), unlinked);
        return false;
    }
    hold_no_fit(now,
                "no plan yet: linking to " + std::to_string(unlinked) + " more node(s) of the mesh",
                /*stop_pipeline=*/false);
    return true;
}

std::optional<mesh::NodeId> MeshRuntime::Impl::may_come_back(Clock::time_point now) {
    std::erase_if(refused_gone, [&](const auto& entry) {
        return now - entry.second >= options.membership.suspect_after ||
               membership.find(entry.first) != nullptr;  // back already
    });
    if (refused_gone.empty()) return std::nullopt;
    return refused_gone.begin()->first;
}

bool MeshRuntime::Impl::hold_no_fit_for_comeback(Clock::time_point now, bool stop_pipeline) {
    const auto gone = may_come_back(now);
    if (!gone) return false;
    hold_no_fit(now,
                "re-planning: node " + gone->short_string() +
                    " is gone and the others cannot hold the model; waiting for it to come back",
                stop_pipeline);
    return true;
}

void MeshRuntime::Impl::hold_no_fit(Clock::time_point now, const std::string& why,
                                    bool stop_pipeline) {
    // Requests wait (a plan is expected) rather than get the "no fit" 503; asked again shortly.
    if (stop_pipeline || ((!agreement.active() || !active_built) && unavailable != why)) {
        set_unavailable(why, /*plan_expected=*/true);
    }
    mark_plan_dirty(why);
    plan_not_before = now + options.plan_debounce;
}

void MeshRuntime::Impl::set_unavailable(std::string why, bool plan_expected) {
    unavailable = why;
    if (host != nullptr) host->deactivate(std::move(why), plan_expected);
    active_built = false;
}

mesh::PlanRequest MeshRuntime::Impl::plan_request() const {
    mesh::PlanRequest request;
    request.shape = options.shape;
    request.tied_embeddings = options.tied_embeddings;
    request.context_tokens = std::max(1, options.context_tokens);
    request.expected_concurrency = std::max(1, options.expected_concurrency);
    request.activation_bytes = mesh::activation_dtype_bytes(options.activations);
    for (const mesh::NodeId& id : membership.alive_ids()) {
        const mesh::CapacityReport* c = nullptr;
        if (id == key.id()) {
            c = membership.self_capacity() ? &*membership.self_capacity() : nullptr;
        } else if (const mesh::Member* m = membership.find(id); m && m->capacity) {
            c = &*m->capacity;
        }
        if (c == nullptr || c->model_id != options.model_id) continue;
        request.nodes.push_back({id, c->memory_bytes, c->seconds_per_layer, c->backend,
                                 c->kv_bytes_per_token_per_layer});
        for (const mesh::LinkMeasurement& l : c->links) {
            if (l.rtt_us == 0) continue;
            request.links.push_back({id, l.peer, l.rtt_us * 1e-6, l.bandwidth_bytes_per_s});
        }
    }
    request.default_rtt_s = mesh::median_measured_rtt_s(request.links, request.default_rtt_s);
    return request;
}

mesh::Result<mesh::Plan> MeshRuntime::Impl::compute_plan() const {
    const mesh::PlanRequest request = plan_request();
    std::string nodes;
    for (const mesh::NodeCapacity& n : request.nodes) {
        nodes.append(" ")
            .append(n.id.short_string())
            .append(":")
            .append(mesh::format_size(n.memory_bytes));
    }
    logger->debug("planning over{} (context {}, {} stream(s))", nodes, request.context_tokens,
                  request.expected_concurrency);
    return mesh::make_plan(request);
}

void MeshRuntime::Impl::plan_if_due(Clock::time_point now) {
    if (stopping || !plan_dirty || now < plan_not_before) return;
    if (now - dirty_since < options.plan_debounce) return;
    if (!first_plan_done && options.expect_nodes > 0 &&
        static_cast<int>(membership.alive_ids().size()) < options.expect_nodes &&
        now - started_at < options.expect_wait) {
        return;  // more nodes are expected: a first plan without them would be redone at once
    }
    // Members whose capacity is not in yet are about to report (it is sent on link-up).
    for (const mesh::NodeId& id : membership.alive_ids()) {
        const mesh::Member* m = membership.find(id);
        if (id != key.id() && (m == nullptr || !m->capacity) &&
            now - dirty_since < 4 * options.plan_debounce) {
            return;
        }
        if (m != nullptr && m->capacity && m->capacity->model_id != options.model_id &&
            model_mismatch_reported.insert(id).second) {
            logger->warn("member {} serves model '{}', not '{}': it gets no stage",
                         id.short_string(), m->capacity->model_id, options.model_id);
        }
    }
    // A plan naming nodes that some member has no link to yet would stall that member's part of
    // the pipeline: wait (bounded) until every member reports a link to every other.
    if (!members_see_each_other() && now - dirty_since < options.mesh_settle_limit) return;
    if (agreement.proposal_in_flight()) return;  // its outcome re-marks us dirty if needed
    plan_dirty = false;
    first_plan_done = true;

    auto plan = compute_plan();
    if (!plan && (hold_partial_no_fit(now) || hold_no_fit_for_comeback(now, false))) return;
    if (partial_view_since) {
        partial_view_since.reset();
        // Linked to the rest now: the plan it finds comes from the coordinator.
        if (plan && (!agreement.active() || !active_built)) {
            set_unavailable("no plan yet: the mesh is forming", /*plan_expected=*/true);
        }
    }
    if (!plan) {
        const std::string why = "the mesh cannot hold the model: " + plan.error().message;
        if (no_fit != why) logger->warn("no plan: {}", why);
        no_fit = why;
        last_plan.reset();
        // The active plan stays while all of its stages are alive; without one, 503s say why.
        if (!agreement.active() || !active_built) set_unavailable(why, /*plan_expected=*/false);
        mark_settled();
        return;
    }
    no_fit.reset();
    last_plan = *plan;
    if (!agreement.is_coordinator()) return;
    const std::vector<mesh::StageAssignment> stages = assignments_of(*plan);
    if (!force_propose) {
        if (agreement.active() && agreement.active()->stages == stages && active_built) return;
        if (agreement.pending() && agreement.pending()->stages == stages) return;
    }
    force_propose = false;

    mesh::PlanPropose proposal;
    proposal.model_id = options.model_id;
    proposal.stages = stages;
    proposal.predicted_tok_s = plan->stream_tok_s;
    auto actions = agreement.propose(proposal, now);
    if (!actions) {
        logger->warn("cannot propose a plan: {}", actions.error().message);
        return;
    }
    const std::uint64_t epoch = agreement.highest_epoch();
    predicted_tok_s[epoch] = plan->stream_tok_s;
    logger->info("plan {} proposed: {} (predicted {:.1f} tok/s per stream)", epoch,
                 describe_stages(stages), plan->stream_tok_s);
    run_actions(std::move(*actions));
}

void MeshRuntime::Impl::run_actions(std::vector<mesh::AgreementAction> actions) {
    using Kind = mesh::AgreementAction::Kind;
    for (mesh::AgreementAction& a : actions) {
        switch (a.kind) {
            case Kind::kSend:
                send_now(a.to, std::move(a.message));
                break;
            case Kind::kBroadcast:
                broadcast(a.message);
                break;
            case Kind::kLoadStage: {
                const std::uint64_t epoch = a.plan.epoch;
                const model::LayerRange range = a.range;
                logger->info("plan {}: loading layers [{}, {})", epoch, range.first, range.last);
                loader.post([weak = weak_from_this(), epoch, range] {
                    auto self = weak.lock();
                    if (!self) return;
                    const auto t0 = Clock::now();
                    std::optional<std::string> error = self->host->load_stage(epoch, range);
                    const double ms =
                        std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                    boost::asio::post(self->io, [weak, epoch, range, error, ms] {
                        auto s = weak.lock();
                        if (!s || s->stopping) return;
                        if (error) {
                            s->logger->warn("plan {}: loading layers [{}, {}) failed: {}", epoch,
                                            range.first, range.last, *error);
                        } else {
                            s->logger->info(
                                "stage loaded: layers [{}, {}) for plan {} in {:.0f} ms",
                                range.first, range.last, epoch, ms);
                        }
                        s->run_actions(
                            s->agreement.on_local_ready(epoch, !error, error.value_or("")));
                    });
                });
                break;
            }
            case Kind::kActivate:
                activate(a.plan);
                break;
            case Kind::kDropPending: {
                logger->info("plan {} dropped: {}", a.plan.epoch, a.reason);
                const std::uint64_t epoch = a.plan.epoch;
                loader.post([weak = weak_from_this(), epoch] {
                    if (auto self = weak.lock()) self->host->drop_stage(epoch);
                });
                break;
            }
            case Kind::kProposalFailed:
                if (a.retry_now) {
                    logger->info("plan {} failed: {}; proposing again at once", a.plan.epoch,
                                 a.reason);
                } else {
                    logger->warn("plan {} failed: {}; re-planning in {} ms", a.plan.epoch, a.reason,
                                 options.plan_retry.count());
                }
                mark_plan_dirty("proposal failed");
                plan_not_before = a.retry_now ? Clock::now() : Clock::now() + options.plan_retry;
                break;
        }
    }
}

void MeshRuntime::Impl::activate(const mesh::PlanPropose& plan) {
    PipelineRoute route;
    route.epoch = plan.epoch;
    route.self = key.id();
    route.stages = plan.stages;
    route.activations = options.activations;
    if (plan.stages.size() > 1) {
        // The head keeps its sequences within what every stage's memory holds (a stage of a
        // split cannot make room itself: its sequences' samplers are on the tail).
        std::vector<mesh::PlannedStage> stages;
        for (const mesh::StageAssignment& s : plan.stages) {
            stages.push_back({s.node, {s.first_layer, s.last_layer}});
        }
        route.kv_positions = mesh::pipeline_kv_positions(plan_request(), stages);
    }
    // A stage node this node has no link to yet (it joined a moment ago) is linked to shortly;
    // one that is gone is reported by membership, which deactivates the pipeline again.
    logger->info("plan {} committed: {}", plan.epoch, describe_stages(plan.stages));
    host->activate(route);
    unavailable.clear();
    active_built = true;
    // The mesh has formed: no more waiting for `--expect-nodes` or a first view (a node that got
    // its first plan from the coordinator would otherwise wait out `expect_wait` before it could
    // answer "no fit" after a death).
    first_plan_done = true;
    mark_settled();
}

int MeshRuntime::Impl::leave_state() const {
    const auto& active = agreement.active();
    if (!active || !active_built) return 1;  // nothing of ours serves
    bool in_plan = false;
    for (const mesh::StageAssignment& s : active->stages) in_plan |= s.node == key.id();
    if (!in_plan) return 1;
    if (membership.alive_ids().size() <= 1) return -1;
    // Planned since the leave began, and no layout holds the model without us.
    if (!plan_dirty && no_fit && !agreement.proposal_in_flight()) return -1;
    return 0;
}

bool MeshRuntime::Impl::in_active_plan(const mesh::NodeId& id) const {
    const auto& active = agreement.active();
    if (!active || !active_built) return false;
    for (const mesh::StageAssignment& s : active->stages) {
        if (s.node == id) return true;
    }
    return false;
}

void MeshRuntime::Impl::stage_node_gone(const mesh::NodeId& id, bool restarted) {
    const auto& active = agreement.active();
    if (!active || !active_built) return;
    for (const mesh::StageAssignment& s : active->stages) {
        if (s.node == id) {
            logger->warn("stage node {} of plan {} is gone: the pipeline stops until re-planned",
                         id.short_string(), active->epoch);
            if (restarted) {
                // Its new run counts in the next plan: no "no fit" from the others alone.
                set_unavailable("re-planning: stage node " + id.short_string() + " restarted",
                                /*plan_expected=*/true);
                return;
            }
            // If the others cannot hold the model, say that at once (requests then get a fast
            // 503 instead of waiting for a plan that cannot come). The planner is a pure
            // function of what we know: ask it now rather than after the planning debounce.
            if (!no_fit) {
                if (auto plan = compute_plan(); !plan) {
                    if (hold_no_fit_for_comeback(Clock::now(), /*stop_pipeline=*/true)) return;
                    no_fit = "the mesh cannot hold the model: " + plan.error().message;
                    logger->warn("no plan: {}", *no_fit);
                }
            }
            set_unavailable(no_fit
                                ? *no_fit
                                : "re-planning: stage node " + id.short_string() + " left the mesh",
                            /*plan_expected=*/!no_fit);
            return;
        }
    }
}

}  // namespace brigade::node
