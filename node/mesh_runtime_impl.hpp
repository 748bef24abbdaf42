#pragma once
// MeshRuntime's state, shared by its feature files (mesh_runtime*.cpp). Everything below the
// "I/O thread only" line is touched only on `io`'s one thread: no locks there.

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "mesh/agreement.hpp"
#include "mesh/discovery.hpp"
#include "mesh/membership.hpp"
#include "mesh/multicast_beacon.hpp"
#include "mesh/planner.hpp"
#include "mesh/tcp_transport.hpp"
#include "node/mesh_runtime.hpp"

namespace brigade::node {

// One thread running queued jobs in order (stage loads and drops); bounded by stop().
class LoaderThread {
public:
    void start();
    void post(std::function<void()> job);
    void stop();  // lets the running job finish, drops the rest, joins

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stopping_ = false;
    std::thread thread_;
};

// An authenticated link and its ordered send queue (one writer coroutine per link).
struct LinkSlot {
    explicit LinkSlot(std::shared_ptr<mesh::Link> l, bool dialled,
                      const boost::asio::any_io_executor& ex)
        : link(std::move(l)), outbound(dialled), wake(ex) {
        wake.expires_at(std::chrono::steady_clock::time_point::max());
    }
    std::shared_ptr<mesh::Link> link;
    bool outbound = false;  // we dialled it
    // Where the peer's run listens, as this link shows it: the address we dialled, or its host
    // with the port from its Hello. Unknown for in-process links.
    std::optional<mesh::PeerAddress> listens_at;
    std::deque<mesh::Message> queue;
    boost::asio::steady_timer wake;  // cancelled when the queue gets a frame or the link closes
    bool retired = false;            // replaced by a duplicate's winner, or closed by us
};

// Redial state of one target (a peer id or a seed address).
struct DialState {
    bool in_flight = false;
    mesh::Clock::time_point next_attempt{};
    std::chrono::milliseconds backoff{0};
    std::size_t attempts = 0;
    bool round_ends = true;  // the attempt in flight is at the peer's last known address
    bool reported = false;   // first failure logged at info, later ones at debug
};

// What a member offers to the planner; a change of these (not of RTTs) re-plans.
struct PlanInputs {
    std::uint64_t memory_bytes = 0;
    double seconds_per_layer = 0;
    std::string model_id;
    std::string backend;
    bool operator==(const PlanInputs&) const = default;
};

class RuntimeSender final : public FrameSender {
public:
    explicit RuntimeSender(MeshRuntime::Impl& impl) : impl_(impl) {}
    void send(const mesh::NodeId& to, mesh::Message message) override;

private:
    MeshRuntime::Impl& impl_;
};

struct MeshRuntime::Impl : std::enable_shared_from_this<MeshRuntime::Impl> {
    Impl(mesh::NodeKey k, mesh::MeshCredentials c, MeshRuntimeOptions o,
         std::shared_ptr<spdlog::logger> l);

    // Fixed after construction.
    mesh::NodeKey key;
    mesh::MeshCredentials credentials;
    MeshRuntimeOptions options;
    std::shared_ptr<spdlog::logger> logger;
    RuntimeSender frame_sender{*this};
    // This run of the node (Hello::incarnation): a peer that sees it change knows we restarted.
    const std::uint64_t incarnation = mesh::new_incarnation();
    boost::asio::io_context io;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
    std::thread io_thread;
    LoaderThread loader;
    PipelineHost* host = nullptr;
    std::atomic<bool> started{false};
    std::atomic<bool> stopped{false};
    std::atomic<bool> is_settled{false};
    std::atomic<std::uint16_t> bound_port{0};
    std::mutex addresses_mutex;
    std::vector<mesh::PeerAddress> addresses;  // self_addresses(); fixed once started
    std::mutex settled_mutex;
    std::function<void()> on_settled;

    // ---- I/O thread only ----------------------------------------------------------------
    std::unique_ptr<mesh::TcpListener> listener;
    std::unique_ptr<mesh::MulticastBeacon> beacon;
    mesh::PeerDirectory directory;
    mesh::Membership membership;
    mesh::Agreement agreement;
    std::map<mesh::NodeId, std::shared_ptr<LinkSlot>> links;
    // Frames for a peer whose link is not up yet (e.g. a restarted node that learned the plan
    // from one peer before it linked to the head), delivered when it comes up; dropped after
    // kHoldOutgoing or beyond kMaxHeldOutgoing per peer.
    struct HeldOutgoing {
        mesh::Clock::time_point since;
        mesh::Message message;
    };
    std::map<mesh::NodeId, std::deque<HeldOutgoing>> held_outgoing;
    static constexpr std::chrono::milliseconds kHoldOutgoing{3000};
    static constexpr std::size_t kMaxHeldOutgoing = 256;
    void expire_held_outgoing(mesh::Clock::time_point now);
    // The incarnation each linked peer's Hello named (0: a node before protocol 1.2).
    std::map<mesh::NodeId, std::uint64_t> peer_incarnations;
    std::optional<mesh::NodeId> restarting;  // set while peer_restarted reports the old run gone
    // Links of ours to stage nodes of the active plan that dropped and came back (Capacity's
    // link_resets), and the latest count each member reported.
    std::uint64_t link_resets = 0;
    std::map<mesh::NodeId, std::uint64_t> member_link_resets;
    std::map<mesh::NodeId, DialState> peer_dials;
    std::map<mesh::PeerAddress, DialState> seed_dials;
    std::map<mesh::PeerAddress, mesh::NodeId> seed_ids;  // which node a seed address turned out
    std::map<mesh::NodeId, mesh::Clock::time_point> first_seen;
    std::map<mesh::NodeId, PlanInputs> plan_inputs;
    std::set<mesh::NodeId> model_mismatch_reported;
    boost::asio::steady_timer ticker{io};
    bool stopping = false;
    mesh::Clock::time_point started_at{};
    mesh::Clock::time_point last_capacity_sent{};
    mesh::Clock::time_point last_gossip_sent{};
    // Planning.
    bool plan_dirty = true;
    mesh::Clock::time_point dirty_since{};
    mesh::Clock::time_point plan_not_before{};
    bool first_plan_done = false;
    // Since when a first "no fit" has been held back for nodes we are not linked to yet.
    std::optional<mesh::Clock::time_point> partial_view_since;
    // Members taken as gone because the port they listened at refused a dial, and when. A
    // process manager may bring such a node back within a second: until the suspect time has
    // passed, a "no fit" without it is not final (the verdict came no sooner before).
    std::map<mesh::NodeId, mesh::Clock::time_point> refused_gone;
    // Peers' listening addresses that a connect from this node has reached (a dial that linked,
    // or the probe after an accepted link). Only there does a refusal mean the process is gone:
    // a firewall that rejects our connects would answer "refused" for a live peer too.
    std::set<mesh::PeerAddress> reached_listeners;
    // A member refused the active plan (it had seen a higher epoch, or another coordinator):
    // propose again, above every epoch seen, even if the stages are the same.
    bool force_propose = false;
    std::optional<mesh::Plan> last_plan;  // the planner's latest answer (predicted throughput)
    std::optional<std::string> no_fit;    // why the model fits nowhere, while it does not
    std::map<std::uint64_t, double> predicted_tok_s;  // by proposal epoch
    std::string unavailable;  // why no pipeline serves (while none is active)
    bool active_built = false;
    bool leaving = false;  // leave(): offer no memory, wait for a plan without this node

    // mesh_runtime.cpp
    mesh::Result<void> open();
    void run_tick();
    boost::asio::awaitable<void> tick_loop();
    void mark_settled();
    mesh::LinkConfig link_config() const;
    // The links' idle timeout: the suspect time, or 3 keepalive intervals if longer.
    std::chrono::milliseconds link_idle_timeout() const;
    void log(mesh::LogLevel level, std::string_view line) const;
    void shutdown_on_io();

    // mesh_runtime_links.cpp
    boost::asio::awaitable<void> accept_loop();
    boost::asio::awaitable<void> accept_one(boost::asio::ip::tcp::socket socket);
    // After a link to `peer` dropped without a goodbye: is anything still listening `at` its
    // address? "Refused" removes the member at once.
    boost::asio::awaitable<void> check_gone(std::shared_ptr<const mesh::NodeId> peer,
                                            std::shared_ptr<const mesh::PeerAddress> at);
    // After a peer linked to us: can this node connect where it says it listens? Adds the
    // address to reached_listeners if so.
    boost::asio::awaitable<void> check_reachable(std::shared_ptr<const mesh::PeerAddress> at);
    void remember_reached(const mesh::PeerAddress& at);
    boost::asio::awaitable<void> dial(std::shared_ptr<mesh::PeerAddress> address,
                                      std::shared_ptr<std::optional<mesh::NodeId>> expected);
    void dial_due(mesh::Clock::time_point now);
    void adopt(std::shared_ptr<mesh::Link> link, bool outbound,
               std::optional<mesh::PeerAddress> dialled);
    // The peer linked again as another run of itself: its previous run is gone.
    void peer_restarted(const mesh::NodeId& peer, mesh::Clock::time_point now);
    // The same run of the peer linked again after its link dropped.
    void peer_relinked(const mesh::NodeId& peer);
    boost::asio::awaitable<void> read_loop(std::shared_ptr<LinkSlot> slot);
    boost::asio::awaitable<void> write_loop(std::shared_ptr<LinkSlot> slot);
    void link_closed(const std::shared_ptr<LinkSlot>& slot);
    void send_now(const mesh::NodeId& to, mesh::Message message);
    void broadcast(const mesh::Message& message);
    bool linked(const mesh::NodeId& id) const;

    // mesh_runtime_members.cpp
    void on_beacon(const mesh::Beacon& beacon, const std::string& source_host);
    void on_discovery(const std::vector<mesh::DiscoveryEvent>& events);
    void on_member_events(const std::vector<mesh::MemberEvent>& events);
    void refresh_membership(mesh::Clock::time_point now);
    mesh::CapacityReport self_capacity();
    // This node's links' round trips as measured now, and every other member's as it last
    // reported them.
    LinkRtts link_rtts() const;
    void send_capacity_and_peers(const std::optional<mesh::NodeId>& to);

    // mesh_runtime_planning.cpp
    void plan_if_due(mesh::Clock::time_point now);
    void mark_plan_dirty(const std::string& why);
    // The planner's input: this node's model and options, the alive members' capacities.
    mesh::PlanRequest plan_request() const;
    mesh::Result<mesh::Plan> compute_plan() const;
    bool members_see_each_other() const;
    // Nodes that members report links to but that are not members here (not linked yet).
    std::size_t nodes_known_only_by_hearsay() const;
    // True if a "no fit" is held back, for now, as this node's view of the mesh is partial.
    bool hold_partial_no_fit(mesh::Clock::time_point now);
    // A node of `refused_gone` that may still come back, if any (older entries are dropped).
    std::optional<mesh::NodeId> may_come_back(mesh::Clock::time_point now);
    // True if a "no fit" is held back, for now, as a node just taken as gone may come back;
    // `stop_pipeline`: that node's stage is gone, so the active pipeline stops either way.
    bool hold_no_fit_for_comeback(mesh::Clock::time_point now, bool stop_pipeline);
    // What both holds do: unavailable with `why` while a plan is expected, planned again soon.
    void hold_no_fit(mesh::Clock::time_point now, const std::string& why, bool stop_pipeline);
    void run_actions(std::vector<mesh::AgreementAction> actions);
    void activate(const mesh::PlanPropose& plan);
    // `restarted`: a new run of it has already linked (peer_restarted), so a plan is coming.
    void stage_node_gone(const mesh::NodeId& id, bool restarted);
    // Whether `id` holds a stage of the active plan, while it serves.
    bool in_active_plan(const mesh::NodeId& id) const;
    // `plan_expected`: a plan is being formed (requests may wait for it); false: final until
    // capacity changes (the model fits nowhere).
    void set_unavailable(std::string why, bool plan_expected);
    // leave(): 1 handed over (the committed plan does not use this node), -1 cannot be handed
    // over (alone, or no plan without it), 0 not yet.
    int leave_state() const;

    // mesh_runtime_dispatch.cpp
    void on_frame(const std::shared_ptr<LinkSlot>& slot, mesh::Message message);

    // mesh_status.cpp builds the JSON from this.
    nlohmann::json status_on_io() const;
};

}  // namespace brigade::node
