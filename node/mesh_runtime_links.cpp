// MeshRuntime links: accepting, dialling with backoff, one link per pair, ordered send queues.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "node/mesh_runtime_impl.hpp"

namespace brigade::node {
namespace asio = boost::asio;
using mesh::Clock;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// A higher id waits this long for the lower id to dial it before dialling itself, so that two
// nodes that learn of each other at once rarely both dial.
constexpr auto kDialGrace = std::chrono::milliseconds(1500);
// Connects to where a dropped link's peer listened, to tell a dead process from a broken link.
constexpr int kGoneChecks = 3;
constexpr auto kGoneCheckInterval = std::chrono::milliseconds(50);
// The most listening addresses kept as reached (remember_reached).
constexpr std::size_t kMaxReachedListeners = 1024;

void detached_task(std::exception_ptr) {}

// The dialler of a link, for the duplicate tie-break.
bool dialled_by_lower_id(bool outbound, const mesh::NodeId& self, const mesh::NodeId& peer) {
    return outbound ? self < peer : peer < self;
}

std::chrono::milliseconds next_backoff(std::chrono::milliseconds current,
                                       const MeshRuntimeOptions& o) {
    if (current.count() == 0) return o.redial_min;
    return std::min(o.redial_max, current * 2);
}

}  // namespace

bool MeshRuntime::Impl::linked(const mesh::NodeId& id) const {
    auto it = links.find(id);
    return it != links.end() && it->second->link->is_open();
}

asio::awaitable<void> MeshRuntime::Impl::accept_loop() {
    while (!stopping) {
        auto socket = co_await listener->async_accept();
        if (stopping) co_return;
        if (!socket) {
            logger->warn("mesh accept failed: {}", socket.error().message);
            asio::steady_timer pause(io, std::chrono::milliseconds(100));
            co_await pause.async_wait(kNoThrow);
            continue;
        }
        // Each handshake in its own coroutine: a slow stranger never delays the next one.
        asio::co_spawn(io, accept_one(std::move(*socket)), detached_task);
    }
}

asio::awaitable<void> MeshRuntime::Impl::accept_one(asio::ip::tcp::socket socket) {
    const mesh::LinkConfig config = link_config();
    auto link = co_await mesh::async_accept_link(std::move(socket), key, credentials, config);
    if (!link) co_return;  // the transport logged why (wrong secret, timeout, ...)
    adopt(std::move(*link), false, std::nullopt);
}

void MeshRuntime::Impl::dial_due(Clock::time_point now) {
    if (stopping) return;
    auto due = [&](DialState& d) { return !d.in_flight && now >= d.next_attempt; };
    // Seeds whose node we do not know yet (or whose node has no link).
    for (const mesh::PeerAddress& seed : directory.seeds()) {
        auto known = seed_ids.find(seed);
        if (known != seed_ids.end() && (linked(known->second) || known->second == key.id())) {
            continue;
        }
        DialState& d = seed_dials[seed];
        if (!due(d)) continue;
        d.in_flight = true;
        ++d.attempts;
        asio::co_spawn(io,
                       dial(std::make_shared<mesh::PeerAddress>(seed),
                            std::make_shared<std::optional<mesh::NodeId>>()),
                       detached_task);
    }
    // Peers known by id (beacons, gossip): the lower id dials; the higher one after a grace.
    for (const mesh::PeerInfo& peer : directory.peer_list({}).peers) {
        if (peer.id == key.id() || peer.addresses.empty() || linked(peer.id)) continue;
        auto [seen, inserted] = first_seen.try_emplace(peer.id, now);
        if (!(key.id() < peer.id) && now - seen->second < kDialGrace) continue;
        DialState& d = peer_dials[peer.id];
        if (!due(d)) continue;
        d.in_flight = true;
        const mesh::PeerAddress& address = peer.addresses[d.attempts % peer.addresses.size()];
        ++d.attempts;
        d.round_ends = d.attempts % peer.addresses.size() == 0;
        asio::co_spawn(io,
                       dial(std::make_shared<mesh::PeerAddress>(address),
                            std::make_shared<std::optional<mesh::NodeId>>(peer.id)),
                       detached_task);
    }
}

asio::awaitable<void> MeshRuntime::Impl::dial(
    std::shared_ptr<mesh::PeerAddress> address,
    std::shared_ptr<std::optional<mesh::NodeId>> expected) {
    const mesh::LinkConfig config = link_config();
    const mesh::PeerAddress target = *address;
    auto link = co_await mesh::async_connect_link(target, key, credentials, config);
    if (stopping) {
        if (link) (*link)->close("stopping");
        co_return;
    }
    DialState& d = expected->has_value() ? peer_dials[**expected] : seed_dials[*address];
    d.in_flight = false;
    if (!link) {
        // A peer's addresses are tried one after another, and the backoff grows per round over
        // all of them: ports of its earlier runs (gossip still names them) cost a refused
        // connect each, not a backoff step each.
        const bool next_address = expected->has_value() && !d.round_ends;
        if (next_address) {
            d.next_attempt = Clock::now();
        } else {
            d.backoff = next_backoff(d.backoff, options);
            d.next_attempt = Clock::now() + d.backoff;
        }
        const std::string who =
            expected->has_value() ? (*expected)->short_string() + " at " : std::string();
        if (!d.reported && !next_address) {
            logger->info("mesh: cannot reach {}{}: {} (retrying with backoff)", who,
                         address->to_string(), link.error().message);
            d.reported = true;
        } else {
            logger->debug("mesh: cannot reach {}{}: {}", who, address->to_string(),
                          link.error().message);
        }
        if (next_address) dial_due(Clock::now());
        co_return;
    }
    d.backoff = std::chrono::milliseconds(0);
    d.reported = false;
    d.next_attempt = Clock::now() + options.redial_min;
    const mesh::NodeId peer = (*link)->peer().id;
    if (!expected->has_value()) seed_ids[*address] = peer;
    if (expected->has_value() && **expected != peer) {
        logger->info("mesh: {} answered as {} (expected {})", address->to_string(),
                     peer.short_string(), (*expected)->short_string());
    }
    adopt(std::move(*link), true, *address);
}

void MeshRuntime::Impl::adopt(std::shared_ptr<mesh::Link> link, bool outbound,
                              std::optional<mesh::PeerAddress> dialled) {
    const mesh::NodeId peer = link->peer().id;
    if (stopping) {
        link->close("stopping");
        return;
    }
    if (peer == key.id()) {
        link->close("dialled ourselves");
        return;
    }
    // Before the duplicate check: a link of the previous run may still look open.
    bool same_run = false;  // a link of this run of the peer came up before
    bool relinked = false;
    if (const std::uint64_t incarnation = link->peer().hello.incarnation; incarnation != 0) {
        const auto known = peer_incarnations.find(peer);
        if (known != peer_incarnations.end() && known->second != incarnation) {
            peer_restarted(peer, Clock::now());
        } else if (known != peer_incarnations.end()) {
            same_run = true;
            const auto open = links.find(peer);
            relinked = open == links.end() || !open->second->link->is_open();
        }
        peer_incarnations[peer] = incarnation;
    }
    std::deque<mesh::Message> unsent;  // of a link this one replaces
    if (auto it = links.find(peer); it != links.end() && it->second->link->is_open()) {
        // Both dialled: on both sides the link dialled by the lower id wins.
        if (!dialled_by_lower_id(outbound, key.id(), peer)) {
            logger->debug("mesh: duplicate link with {} closed", peer.short_string());
            link->close("duplicate link");
            return;
        }
        // Both ends redial after a reset, so the link that lost can be one that already carried
        // frames: those still queued move over, but those on their way either way are lost,
        // which is a reset like any other.
        relinked = relinked || same_run;
        if (host != nullptr) host->on_link_down(peer);
        unsent = std::move(it->second->queue);
        it->second->retired = true;
        it->second->link->close("duplicate link");
        it->second->wake.cancel();
        logger->debug("mesh: duplicate link with {} replaced", peer.short_string());
    }
    auto slot = std::make_shared<LinkSlot>(link, outbound, io.get_executor());
    slot->queue = std::move(unsent);
    const mesh::LinkPeer& info = link->peer();
    // Where the peer listens: the address we dialled, or its host with the port from its Hello.
    if (outbound && dialled) {
        slot->listens_at = *dialled;
        remember_reached(*dialled);
    } else if (info.hello.listen_port != 0 && !info.remote_host.empty()) {
        slot->listens_at = mesh::PeerAddress{info.remote_host, info.hello.listen_port};
        if (!reached_listeners.contains(*slot->listens_at)) {
            asio::co_spawn(
                io, check_reachable(std::make_shared<const mesh::PeerAddress>(*slot->listens_at)),
                detached_task);
        }
    }
    links[peer] = slot;
    if (relinked) peer_relinked(peer);
    // Frames sent now (an origin resuming its requests) go out on the new link.
    if (host != nullptr) host->on_link_up(peer);
    logger->info("mesh link up with {} ({} {})", peer.short_string(),
                 outbound ? "dialled" : "accepted from",
                 outbound && dialled ? dialled->to_string() : info.remote_host);
    const auto now = Clock::now();
    if (slot->listens_at) on_discovery(directory.on_linked(peer, *slot->listens_at, now));
    // A redial after this link drops starts at the address it linked at (first in the directory).
    peer_dials[peer].backoff = std::chrono::milliseconds(0);
    peer_dials[peer].attempts = 0;
    if (auto held = held_outgoing.find(peer); held != held_outgoing.end()) {
        expire_held_outgoing(Clock::now());
        if (auto again = held_outgoing.find(peer); again != held_outgoing.end()) {
            for (auto& h : again->second) slot->queue.push_back(std::move(h.message));
            held_outgoing.erase(again);
        }
    }
    asio::co_spawn(io, read_loop(slot), detached_task);
    asio::co_spawn(io, write_loop(slot), detached_task);
    send_capacity_and_peers(peer);
    // Everyone else learns of the new peer now rather than at the next periodic gossip.
    for (const auto& [id, other] : links) {
        if (id != peer) send_capacity_and_peers(id);
    }
    on_member_events(membership.on_heard(peer, now));
    // A node that (re)joins learns the committed plan from the coordinator.
    run_actions(agreement.on_peer_joined(peer));
}

void MeshRuntime::Impl::peer_restarted(const mesh::NodeId& peer, Clock::time_point now) {
    logger->warn("member {} restarted: its previous run is gone (a new run linked)",
                 peer.short_string());
    held_outgoing.erase(peer);  // frames for the previous run
    // The previous run leaves as if it had said Bye (its stage and the KV of requests in flight
    // died with it), then the new run joins: a re-plan follows, as after a death, without
    // waiting for membership's timeouts, which a quick restart never trips.
    restarting = peer;
    on_member_events(membership.on_left(peer));
    restarting.reset();
    on_member_events(membership.on_heard(peer, now));
}

void MeshRuntime::Impl::peer_relinked(const mesh::NodeId& peer) {
    if (!in_active_plan(peer) || !in_active_plan(key.id())) return;
    // Frames of the pipeline that were on the dropped link are lost, and nobody waits for them
    // but the head (for a minute). Our next Capacity report (adopt sends it to every member)
    // carries the new count; a coordinator acts on its own.
    ++link_resets;
    logger->warn(
        "mesh link to stage node {} dropped and came back: pipeline frames on it may be lost; "
        "asking for a new plan",
        peer.short_string());
    if (agreement.is_coordinator()) {
        force_propose = true;
        mark_plan_dirty("link to " + peer.short_string() + " reset");
    }
}

asio::awaitable<void> MeshRuntime::Impl::read_loop(std::shared_ptr<LinkSlot> slot) {
    const std::shared_ptr<mesh::Link> link = slot->link;
    for (;;) {
        auto m = co_await link->async_receive(std::chrono::milliseconds(1000));
        if (stopping || slot->retired) break;
        if (!m) {
            if (m.error().code == mesh::errc::timeout && link->is_open()) continue;
            break;
        }
        on_frame(slot, std::move(*m));
    }
    link_closed(slot);
}

asio::awaitable<void> MeshRuntime::Impl::write_loop(std::shared_ptr<LinkSlot> slot) {
    const std::shared_ptr<mesh::Link> link = slot->link;
    for (;;) {
        while (slot->queue.empty() && !slot->retired && link->is_open()) {
            co_await slot->wake.async_wait(kNoThrow);
        }
        if (slot->queue.empty() || !link->is_open()) co_return;
        mesh::Message message = std::move(slot->queue.front());
        slot->queue.pop_front();
        auto sent = co_await link->async_send(std::move(message));
        if (!sent) co_return;  // closed: the read loop reports it
    }
}

void MeshRuntime::Impl::link_closed(const std::shared_ptr<LinkSlot>& slot) {
    slot->wake.cancel();
    if (stopping || slot->retired) return;
    const mesh::NodeId peer = slot->link->peer().id;
    auto it = links.find(peer);
    if (it == links.end() || it->second != slot) return;
    links.erase(it);
    slot->retired = true;
    const std::string reason = slot->link->close_reason();
    logger->info("mesh link down with {}: {}", peer.short_string(), reason);
    slot->link->close("link down");
    if (host != nullptr) host->on_link_down(peer);
    // A goodbye removes the member at once. Any other loss is either a broken link or a process
    // that died (a crash, kill -9) on a host that is up: such a host refuses a connection where
    // the process listened, and the member is taken as gone then (check_gone), if this node
    // has connected there before; otherwise membership's timeouts decide, redialling meanwhile.
    if (reason.find("peer said bye: leaving") != std::string::npos) {
        if (slot->listens_at) reached_listeners.erase(*slot->listens_at);
        on_member_events(membership.on_left(peer));
    } else if (slot->listens_at && reached_listeners.contains(*slot->listens_at) &&
               membership.find(peer) != nullptr) {
        asio::co_spawn(io,
                       check_gone(std::make_shared<const mesh::NodeId>(peer),
                                  std::make_shared<const mesh::PeerAddress>(*slot->listens_at)),
                       detached_task);
    }
    DialState& d = peer_dials[peer];
    d.next_attempt = Clock::now() + options.redial_min;
}

asio::awaitable<void> MeshRuntime::Impl::check_gone(std::shared_ptr<const mesh::NodeId> peer,
                                                    std::shared_ptr<const mesh::PeerAddress> at) {
    // A bare TCP connect, no link: a link here would race the redials of both ends. A process
    // being killed may still accept for a moment (its listening socket closes after its
    // links), so an accepted connect is asked again twice, 50 ms apart.
    for (int check = 0; check < kGoneChecks; ++check) {
        if (check > 0) {
            asio::steady_timer pause(io, kGoneCheckInterval);
            co_await pause.async_wait(kNoThrow);
        }
        auto probe = co_await mesh::async_probe_listener(*at, options.connect_timeout);
        if (stopping || linked(*peer) || membership.find(*peer) == nullptr) co_return;
        if (probe) continue;
        if (probe.error().code != mesh::errc::refused) co_return;  // a timeout proves nothing
        logger->info("member {}: its link dropped and {} refuses connections: taken as gone",
                     peer->short_string(), at->to_string());
        refused_gone[*peer] = Clock::now();
        reached_listeners.erase(*at);
        on_member_events(membership.on_left(*peer));
        co_return;
    }
}

void MeshRuntime::Impl::remember_reached(const mesh::PeerAddress& at) {
    // Addresses leave with a goodbye or a refusal; peers that vanish otherwise (a cut network)
    // leave theirs behind. A mesh of a few nodes never nears the bound; past it the set starts
    // again, which only sends drops to the timeouts until the addresses are reached anew.
    if (reached_listeners.size() >= kMaxReachedListeners) reached_listeners.clear();
    reached_listeners.insert(at);
}

asio::awaitable<void> MeshRuntime::Impl::check_reachable(
    std::shared_ptr<const mesh::PeerAddress> at) {
    auto probe = co_await mesh::async_probe_listener(*at, options.connect_timeout);
    if (stopping) co_return;
    if (probe) {
        remember_reached(*at);
    } else {
        logger->debug(
            "mesh: {} does not take our connects ({}): a drop of its link is left to "
            "the timeouts",
            at->to_string(), probe.error().message);
    }
}

void MeshRuntime::Impl::send_now(const mesh::NodeId& to, mesh::Message message) {
    if (stopping) return;
    auto it = links.find(to);
    if (it == links.end() || !it->second->link->is_open()) {
        auto& held = held_outgoing[to];
        if (held.size() >= kMaxHeldOutgoing) {
            logger->debug("mesh: no link to {}: {} frame dropped", to.short_string(),
                          mesh::msg_type_name(mesh::message_type(message)));
            return;
        }
        held.push_back({Clock::now(), std::move(message)});
        return;
    }
    it->second->queue.push_back(std::move(message));
    it->second->wake.cancel();
}

void MeshRuntime::Impl::expire_held_outgoing(mesh::Clock::time_point now) {
    for (auto it = held_outgoing.begin(); it != held_outgoing.end();) {
        auto& held = it->second;
        while (!held.empty() && now - held.front().since >= kHoldOutgoing) {
            logger->debug("mesh: no link to {} within {} ms: {} frame dropped",
                          it->first.short_string(), kHoldOutgoing.count(),
                          mesh::msg_type_name(mesh::message_type(held.front().message)));
            held.pop_front();
        }
        it = held.empty() ? held_outgoing.erase(it) : std::next(it);
    }
}

void MeshRuntime::Impl::broadcast(const mesh::Message& message) {
    for (auto& [id, slot] : links) {
        if (!slot->link->is_open()) continue;
        slot->queue.push_back(message);
        slot->wake.cancel();
    }
}

}  // namespace brigade::node
