#include "mesh/membership.hpp"

namespace brigade::mesh {

const char* member_event_name(MemberEventKind k) {
    switch (k) {
        case MemberEventKind::kJoined:
            return "joined";
        case MemberEventKind::kSuspect:
            return "suspect";
        case MemberEventKind::kRecovered:
            return "recovered";
        case MemberEventKind::kDead:
            return "dead";
        case MemberEventKind::kLeft:
            return "left";
        case MemberEventKind::kCapacityChanged:
            return "capacity";
    }
    return "?";
}

Membership::Membership(NodeId self, MembershipConfig config) : self_(self), config_(config) {}

std::vector<MemberEvent> Membership::on_heard(const NodeId& id, Clock::time_point now) {
    std::vector<MemberEvent> events;
    if (id == self_) return events;
    auto it = members_.find(id);
    if (it == members_.end()) {
        Member m;
        m.id = id;
        m.last_heard = now;
        members_.emplace(id, std::move(m));
        events.push_back({MemberEventKind::kJoined, id});
        return events;
    }
    if (now > it->second.last_heard) it->second.last_heard = now;
    if (it->second.state == MemberState::kSuspect) {
        it->second.state = MemberState::kAlive;
        events.push_back({MemberEventKind::kRecovered, id});
    }
    return events;
}

std::vector<MemberEvent> Membership::on_capacity(const CapacityReport& report,
                                                 Clock::time_point now) {
    if (report.node_id == self_) {
        set_self_capacity(report);
        return {};
    }
    std::vector<MemberEvent> events = on_heard(report.node_id, now);
    Member& m = members_.at(report.node_id);
    if (!m.capacity || !(*m.capacity == report)) {
        m.capacity = report;
        m.rtt_us_to_peers.clear();
        for (const LinkMeasurement& l : report.links) m.rtt_us_to_peers[l.peer] = l.rtt_us;
        events.push_back({MemberEventKind::kCapacityChanged, report.node_id});
    }
    return events;
}

std::vector<MemberEvent> Membership::on_left(const NodeId& id) {
    if (members_.erase(id) == 0) return {};
    return {{MemberEventKind::kLeft, id}};
}

std::vector<MemberEvent> Membership::tick(Clock::time_point now) {
    std::vector<MemberEvent> events;
    for (auto it = members_.begin(); it != members_.end();) {
        const auto silent = now - it->second.last_heard;
        if (silent >= config_.dead_after) {
            events.push_back({MemberEventKind::kDead, it->first});
            it = members_.erase(it);
            continue;
        }
        if (silent >= config_.suspect_after && it->second.state == MemberState::kAlive) {
            it->second.state = MemberState::kSuspect;
            events.push_back({MemberEventKind::kSuspect, it->first});
        }
        ++it;
    }
    return events;
}

void Membership::set_addresses(const NodeId& id, std::vector<PeerAddress> addresses) {
    auto it = members_.find(id);
    if (it != members_.end()) it->second.addresses = std::move(addresses);
}

void Membership::set_self_capacity(CapacityReport report) {
    report.node_id = self_;
    self_capacity_ = std::move(report);
}

std::vector<NodeId> Membership::member_ids() const {
    std::vector<NodeId> ids;
    bool self_added = false;
    for (const auto& [id, m] : members_) {
        if (!self_added && self_ < id) {
            ids.push_back(self_);
            self_added = true;
        }
        ids.push_back(id);
    }
    if (!self_added) ids.push_back(self_);
    return ids;
}

std::vector<NodeId> Membership::alive_ids() const {
    std::vector<NodeId> ids;
    for (const NodeId& id : member_ids()) {
        if (id == self_) {
            ids.push_back(id);
            continue;
        }
        if (members_.at(id).state == MemberState::kAlive) ids.push_back(id);
    }
    return ids;
}

const Member* Membership::find(const NodeId& id) const {
    auto it = members_.find(id);
    return it == members_.end() ? nullptr : &it->second;
}

std::optional<Clock::time_point> Membership::next_deadline() const {
    std::optional<Clock::time_point> next;
    for (const auto& [id, m] : members_) {
        const Clock::time_point t = m.state == MemberState::kAlive
                                        ? m.last_heard + config_.suspect_after
                                        : m.last_heard + config_.dead_after;
        if (!next || t < *next) next = t;
    }
    return next;
}

}  // namespace brigade::mesh
