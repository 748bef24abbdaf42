#pragma once
// The peer table, sans-io: the caller reports what it heard and when, and ticks a clock; the
// table answers with events. No timers or sockets here, so every timing rule is unit-testable.
//
// A member is alive while heard from within `suspect_after`; suspect after that (one missed
// heartbeat interval plus slack); dead after `dead_after`, at which point it leaves the table at
// once (a `kDead` event) so plans and routing stop counting on it. A `Bye` removes it at once.
// Any frame from a peer counts as hearing from it; links send heartbeats when idle.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mesh/identity.hpp"
#include "mesh/messages.hpp"

namespace brigade::mesh {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

struct MembershipConfig {
    Millis heartbeat_interval{1000};  // links ping when nothing was sent for this long
    Millis suspect_after{2500};       // no frame for this long: suspect
    Millis dead_after{6000};          // no frame for this long: dead, removed
};

enum class MemberState { kAlive, kSuspect };

struct Member {
    NodeId id;
    MemberState state = MemberState::kAlive;
    Clock::time_point last_heard{};
    std::vector<PeerAddress> addresses;
    std::optional<CapacityReport> capacity;           // latest report, if any
    std::map<NodeId, std::uint32_t> rtt_us_to_peers;  // from its capacity report
};

enum class MemberEventKind { kJoined, kSuspect, kRecovered, kDead, kLeft, kCapacityChanged };

struct MemberEvent {
    MemberEventKind kind;
    NodeId id;
    bool operator==(const MemberEvent&) const = default;
};

const char* member_event_name(MemberEventKind k);

class Membership {
public:
    Membership(NodeId self, MembershipConfig config = {});

    const NodeId& self() const { return self_; }
    const MembershipConfig& config() const { return config_; }

    // A frame (of any kind) arrived from `id`, or a link to it was established.
    std::vector<MemberEvent> on_heard(const NodeId& id, Clock::time_point now);
    std::vector<MemberEvent> on_capacity(const CapacityReport& report, Clock::time_point now);
    // The peer said goodbye (Bye frame): removed at once.
    std::vector<MemberEvent> on_left(const NodeId& id);
    // Advances time: suspects and removes the silent.
    std::vector<MemberEvent> tick(Clock::time_point now);
    void set_addresses(const NodeId& id, std::vector<PeerAddress> addresses);
    // Our own capacity (self is always a member and always alive).
    void set_self_capacity(CapacityReport report);

    // Alive and suspect peers plus self, ordered by id.
    std::vector<NodeId> member_ids() const;
    // Members not suspect (plus self), ordered by id: what a coordinator plans over.
    std::vector<NodeId> alive_ids() const;
    const Member* find(const NodeId& id) const;
    std::size_t size() const { return members_.size() + 1; }
    const std::optional<CapacityReport>& self_capacity() const { return self_capacity_; }
    // The earliest time `tick` could change something (for the driver's timer).
    std::optional<Clock::time_point> next_deadline() const;

private:
    NodeId self_;
    MembershipConfig config_;
    std::map<NodeId, Member> members_;  // peers only
    std::optional<CapacityReport> self_capacity_;
};

}  // namespace brigade::mesh
