// MeshRuntime members: beacons and gossip feed the peer directory; open links and capacity
// reports feed membership; capacity and peer lists go out on link-up and periodically.

#include "node/mesh_runtime_impl.hpp"

namespace brigade::node {
using mesh::Clock;

void MeshRuntime::Impl::on_beacon(const mesh::Beacon& beacon, const std::string& source_host) {
    if (stopping) return;
    on_discovery(directory.on_beacon(beacon, source_host, Clock::now()));
}

void MeshRuntime::Impl::on_discovery(const std::vector<mesh::DiscoveryEvent>& events) {
    for (const mesh::DiscoveryEvent& e : events) {
        const char* source = e.source == mesh::DiscoverySource::kBeacon ? "beacon"
                             : e.source == mesh::DiscoverySource::kSeed ? "seed"
                                                                        : "gossip";
        const std::string who = e.id ? e.id->short_string() : std::string("a seed");
        if (e.kind == mesh::DiscoveryEvent::Kind::kPeerSeen) {
            logger->debug("mesh: found {} at {} ({})", who, e.address.to_string(), source);
            if (e.id) {
                first_seen.try_emplace(*e.id, Clock::now());
                // A new address of a peer we are not linked to (it restarted on another port)
                // is worth a dial now, not after the backoff its old ones built up.
                if (auto d = peer_dials.find(*e.id); d != peer_dials.end() && !linked(*e.id)) {
                    d->second.backoff = std::chrono::milliseconds(0);
                    d->second.next_attempt = Clock::now();
                    d->second.attempts = 0;
                }
            }
        } else {
            logger->debug("mesh: lost track of {} ({})", who, source);
            if (e.id) {
                first_seen.erase(*e.id);
                peer_dials.erase(*e.id);
            }
        }
    }
}

void MeshRuntime::Impl::refresh_membership(Clock::time_point now) {
    // A link's keepalives are handled inside the link: its peer was alive when bytes last came
    // (not "now": a peer that hangs with its link open would otherwise be suspected only after
    // the link's idle timeout plus the suspect time). Where keepalives are too sparse for the
    // suspect time (it is below 3 keepalive intervals), the link's own tolerance applies.
    const auto allowance = link_idle_timeout() - options.membership.suspect_after;
    for (const auto& [id, slot] : links) {
        if (slot->link->is_open()) {
            const auto heard = std::min(now, slot->link->last_received() + allowance);
            on_member_events(membership.on_heard(id, heard));
        }
    }
    on_member_events(membership.tick(now));
}

void MeshRuntime::Impl::on_member_events(const std::vector<mesh::MemberEvent>& events) {
    bool changed = false;
    for (const mesh::MemberEvent& e : events) {
        const std::string who = e.id.short_string();
        switch (e.kind) {
            case mesh::MemberEventKind::kJoined:
                logger->info("member {} joined ({} members)", who, membership.size());
                changed = true;
                break;
            case mesh::MemberEventKind::kSuspect:
                logger->info("member {} is suspect (silent for {} ms)", who,
                             options.membership.suspect_after.count());
                changed = true;
                break;
            case mesh::MemberEventKind::kRecovered:
                logger->info("member {} recovered", who);
                changed = true;
                break;
            case mesh::MemberEventKind::kDead:
            case mesh::MemberEventKind::kLeft: {
                const bool restarted = restarting == e.id;
                logger->info("member {} {} ({} members)", who,
                             restarted                                ? "restarted: left"
                             : e.kind == mesh::MemberEventKind::kDead ? "is dead"
                                                                      : "left",
                             membership.size());
                plan_inputs.erase(e.id);
                first_seen.erase(e.id);
                if (!restarted) peer_incarnations.erase(e.id);
                member_link_resets.erase(e.id);
                if (auto it = links.find(e.id); it != links.end()) {
                    it->second->retired = true;
                    it->second->link->close("member gone");
                    it->second->wake.cancel();
                    links.erase(it);
                }
                host->on_member_gone(e.id);
                stage_node_gone(e.id, restarted);
                changed = true;
                break;
            }
            case mesh::MemberEventKind::kCapacityChanged: {
                const mesh::Member* m = membership.find(e.id);
                if (m == nullptr || !m->capacity) break;
                // A stage node's link to another dropped and came back (peer_relinked there).
                const std::uint64_t resets = m->capacity->link_resets;
                auto [seen, first] = member_link_resets.try_emplace(e.id, resets);
                if (!first && resets > seen->second && agreement.is_coordinator() &&
                    in_active_plan(e.id)) {
                    force_propose = true;
                    mark_plan_dirty("a link of stage node " + who + " reset");
                }
                seen->second = resets;
                const PlanInputs inputs{m->capacity->memory_bytes, m->capacity->seconds_per_layer,
                                        m->capacity->model_id, m->capacity->backend};
                auto [it, inserted] = plan_inputs.try_emplace(e.id, inputs);
                if (inserted || !(it->second == inputs)) {
                    it->second = inputs;
                    mark_plan_dirty("capacity of " + who);
                }
                break;
            }
        }
    }
    if (changed) {
        run_actions(agreement.on_members(membership.alive_ids()));
        mark_plan_dirty("membership changed");
    }
}

mesh::CapacityReport MeshRuntime::Impl::self_capacity() {
    mesh::CapacityReport r;
    r.node_id = key.id();
    r.memory_bytes = leaving ? 0 : options.memory_bytes;
    r.backend = options.backend;
    r.model_id = options.model_id;
    r.seconds_per_layer = options.seconds_per_layer;
    r.kv_bytes_per_token_per_layer = options.shape.kv_bytes_per_token_per_layer;
    r.link_resets = link_resets;
    for (const auto& [id, slot] : links) {
        if (!slot->link->is_open()) continue;
        mesh::LinkMeasurement m;
        m.peer = id;
        if (auto rtt = slot->link->rtt()) {
            m.rtt_us = static_cast<std::uint32_t>(std::min<std::int64_t>(rtt->count(), UINT32_MAX));
        }
        r.links.push_back(m);
    }
    if (host != nullptr) r.stage = host->stage_stats();
    return r;
}

LinkRtts MeshRuntime::Impl::link_rtts() const {
    LinkRtts out;
    const auto add = [&](const mesh::CapacityReport& c) {
        for (const mesh::LinkMeasurement& l : c.links) {
            if (l.rtt_us != 0) out[{c.node_id, l.peer}] = l.rtt_us;
        }
    };
    for (const auto& [id, slot] : links) {  // this node's own, as measured now
        if (!slot->link->is_open()) continue;
        if (auto rtt = slot->link->rtt(); rtt && rtt->count() > 0) {
            out[{key.id(), id}] =
                static_cast<std::uint32_t>(std::min<std::int64_t>(rtt->count(), UINT32_MAX));
        }
    }
    for (const mesh::NodeId& id : membership.member_ids()) {
        if (const mesh::Member* m = membership.find(id); m != nullptr && m->capacity) {
            add(*m->capacity);
        }
    }
    return out;
}

void MeshRuntime::Impl::send_capacity_and_peers(const std::optional<mesh::NodeId>& to) {
    if (stopping) return;
    mesh::CapacityReport report = self_capacity();
    membership.set_self_capacity(report);
    const mesh::Message capacity = report;
    std::vector<mesh::PeerAddress> self;
    {
        std::lock_guard lock(addresses_mutex);
        self = addresses;
    }
    // Gossip names only members we can vouch for (linked now), plus ourselves.
    mesh::PeerList list;
    for (mesh::PeerInfo& p : directory.peer_list(self).peers) {
        if (p.id == key.id() || linked(p.id)) list.peers.push_back(std::move(p));
    }
    const mesh::Message peers = list;
    if (to) {
        send_now(*to, capacity);
        send_now(*to, peers);
    } else {
        broadcast(capacity);
        broadcast(peers);
    }
}

}  // namespace brigade::node
