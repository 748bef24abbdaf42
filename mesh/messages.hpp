#pragma once
// The typed messages that travel inside encrypted links (see PROTOCOL.md for the byte layout).
// Plain structs; wire.cpp encodes and decodes them field by field, little-endian.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "mesh/identity.hpp"

namespace brigade::mesh {

inline constexpr std::uint16_t kProtocolMajor = 1;
// Minor 1: KvPrefix frames (multi-stage prefix reuse). A node of minor 0 closes a link that
// carries one, so every node of a pipeline must run minor >= 1.
// Minor 2: Hello carries the sender's incarnation, Capacity its link resets (appended; a minor-1
// node ignores them).
inline constexpr std::uint16_t kProtocolMinor = 2;

// Capability bits a node announces in Hello; a link uses the AND of both sides.
enum Capability : std::uint64_t {
    kCapActivationsBf16 = 1u << 0,
    kCapActivationsF32 = 1u << 1,
    kCapPipelineStage = 1u << 2,  // can run a layer range
    kCapApi = 1u << 3,            // serves the HTTP API
};

enum class MsgType : std::uint16_t {
    kHello = 1,
    kHeartbeat = 2,
    kPeerList = 3,
    kCapacity = 4,
    kPlanPropose = 5,
    kPlanAck = 6,
    kPlanCommit = 7,
    kPlanAbort = 8,
    kRequest = 9,
    kActivation = 10,
    kToken = 11,
    kCancel = 12,
    kError = 13,
    kBye = 14,
    kRequestUpdate = 15,
    kKvPrefix = 16,
};
inline constexpr std::uint16_t kMaxMsgType = 16;

// First frame each way on every link. `node_id` must match the identity the handshake proved.
struct Hello {
    std::uint16_t major = kProtocolMajor;
    std::uint16_t minor = kProtocolMinor;
    std::uint64_t capabilities = 0;
    NodeId node_id;
    std::uint16_t listen_port = 0;  // where this node accepts mesh links (0: does not listen)
    std::string software;           // e.g. "brigade/0.1.0", for logs
    // Random, drawn once per process start (never 0 from a node of minor >= 2; 0 from an older
    // node). A peer that links again with another incarnation was restarted: whatever its
    // previous run held (a loaded stage, KV of requests in flight) is gone, even if the restart
    // was too quick for membership's timeouts to notice.
    std::uint64_t incarnation = 0;
    bool operator==(const Hello&) const = default;
};

// Keepalive and RTT probe. A request (`reply == false`) is answered with the same seq and time.
struct Heartbeat {
    std::uint64_t seq = 0;
    std::uint64_t sent_us = 0;  // sender's monotonic clock, echoed back in the reply
    bool reply = false;
    bool operator==(const Heartbeat&) const = default;
};

struct PeerInfo {
    NodeId id;
    std::vector<PeerAddress> addresses;
    bool operator==(const PeerInfo&) const = default;
};

// Gossip: the peers the sender knows about, so every node learns every other.
struct PeerList {
    std::vector<PeerInfo> peers;
    bool operator==(const PeerList&) const = default;
};

struct LinkMeasurement {
    NodeId peer;
    std::uint32_t rtt_us = 0;
    double bandwidth_bytes_per_s = 0;  // 0: not measured
    bool operator==(const LinkMeasurement&) const = default;
};

// Per-stage timings a node reports with its capacity (for /v1/mesh).
struct StageStats {
    std::uint64_t epoch = 0;         // the plan these refer to (0: no stage)
    std::uint64_t steps = 0;         // micro-batches computed
    std::uint64_t tokens = 0;        // rows computed
    std::uint32_t mean_step_us = 0;  // recent mean time of one micro-batch
    bool operator==(const StageStats&) const = default;
};

struct CapacityReport {
    NodeId node_id;
    std::uint64_t memory_bytes = 0;  // offered for weights + KV
    std::string backend;             // "cpu", "cuda", ...
    std::string model_id;            // the model the speed was measured for
    double seconds_per_layer = 0;    // measured decode time of one layer for one token
    std::vector<LinkMeasurement> links;
    StageStats stage;
    // K and V bytes this node's cache holds per token and layer (f16 by default, f32 with
    // --kv-f32), so a plan sizes each stage's KV by the node that holds it. 0: not reported
    // (a node before this field); the planner then uses the model shape's figure.
    std::uint64_t kv_bytes_per_token_per_layer = 0;
    // How many times a link of this node to another stage node of the plan it serves dropped
    // and came back (the same run at both ends). Frames on such a link may have been lost; a
    // count that grows asks the coordinator for a new plan, on which the requests in flight
    // resume. 0 from a node before minor 2.
    std::uint64_t link_resets = 0;
    bool operator==(const CapacityReport&) const = default;
};

struct StageAssignment {
    NodeId node;
    std::int32_t first_layer = 0;
    std::int32_t last_layer = 0;  // exclusive
    bool operator==(const StageAssignment&) const = default;
};

struct PlanPropose {
    std::uint64_t epoch = 0;
    NodeId coordinator;
    std::string model_id;
    std::vector<StageAssignment> stages;
    double predicted_tok_s = 0;
    bool operator==(const PlanPropose&) const = default;
};

enum class AckStatus : std::uint8_t {
    kReady = 0,           // stage loaded (or nothing to load)
    kLoadFailed = 1,      // could not load its range
    kStale = 2,           // epoch not above what this node promised
    kNotCoordinator = 3,  // proposer is not the coordinator in this node's view
};

struct PlanAck {
    std::uint64_t epoch = 0;
    NodeId node_id;
    AckStatus status = AckStatus::kReady;
    std::uint64_t highest_epoch =
        0;  // highest epoch the sender has seen (lets a stale coordinator catch up)
    std::string message;
    bool operator==(const PlanAck&) const = default;
};

struct PlanCommit {
    std::uint64_t epoch = 0;
    NodeId coordinator;
    bool operator==(const PlanCommit&) const = default;
};

struct PlanAbort {
    std::uint64_t epoch = 0;
    NodeId coordinator;
    std::string reason;
    bool operator==(const PlanAbort&) const = default;
};

// A generation request routed to the pipeline head by the node that took it (the origin):
// prompt tokens plus, when a request is resumed on a new pipeline, the tokens already generated;
// and the generation setup (sampling parameters, step, limits), serialized by node/ and opaque
// to mesh/. The head answers with RequestUpdate frames, or an ErrorFrame naming the request.
struct RequestFrame {
    std::uint64_t request_id = 0;  // chosen by the origin, unique across the mesh (random)
    std::uint64_t epoch = 0;       // the plan the origin routed by; a head of another epoch refuses
    NodeId origin;                 // the node that took the request and streams to the client
    std::vector<std::int32_t> tokens;  // prompt, then tokens already generated (resume)
    std::uint32_t n_prompt = 0;        // tokens[0, n_prompt) are the prompt
    std::vector<std::uint8_t> setup;   // node/'s generation setup
    bool operator==(const RequestFrame&) const = default;
};

enum class ActivationDType : std::uint8_t { kBF16 = 0, kF32 = 1 };

inline constexpr std::size_t activation_dtype_bytes(ActivationDType t) {
    return t == ActivationDType::kF32 ? 4 : 2;
}

// One sequence's rows in a micro-batch of hidden states.
struct ActivationEntry {
    std::uint64_t request_id = 0;  // identifies the sequence (and its KV) on every stage
    std::int32_t pos0 = 0;         // position of the first row; must equal what the stage cached
    std::uint32_t n_tokens = 0;    // rows of this entry
    bool wants_token = false;      // the tail samples after the last row (end of prompt / decode)
    // The token ids of the rows: the head embeds them; the tail keeps them as the history that
    // penalties and constrained output look at. [n_tokens]
    std::vector<std::int32_t> tokens;
    // The generation setup, sent with the first chunk of a request on this pipeline so the tail
    // can sample (empty on later chunks).
    std::vector<std::uint8_t> setup;
    bool operator==(const ActivationEntry&) const = default;
};

// A micro-batch of hidden states between stages: rows of every entry in order, [rows, hidden]
// elements of `dtype`, little-endian.
struct ActivationFrame {
    std::uint64_t epoch = 0;       // plan epoch; a stage drops frames of another epoch
    std::uint64_t batch_id = 0;    // chosen by the head; echoed in the tail's TokenFrame
    std::int32_t first_layer = 0;  // the layer the receiving stage starts at
    ActivationDType dtype = ActivationDType::kBF16;
    std::uint32_t hidden = 0;
    std::vector<ActivationEntry> entries;
    std::vector<std::uint8_t> payload;
    std::uint32_t rows() const {
        std::uint32_t n = 0;
        for (const auto& e : entries) n += e.n_tokens;
        return n;
    }
    bool operator==(const ActivationFrame&) const = default;
};

enum class TokenFinish : std::uint8_t {
    kContinue = 0,  // more tokens follow
    kStop = 1,      // a stop token, or the constrained output is complete
    kLength = 2,    // max_tokens or the context is used up
};

struct TopToken {
    std::int32_t token = 0;
    float logprob = 0;
    bool operator==(const TopToken&) const = default;
};

// One sampled token of one request.
struct SampledTokenInfo {
    std::uint64_t request_id = 0;
    std::int32_t token = -1;  // -1: finished without a token (e.g. nothing can continue the JSON)
    float logprob = 0;
    std::vector<TopToken> top;  // top_logprobs alternatives, best first (empty unless asked)
    TokenFinish finish = TokenFinish::kContinue;
    bool operator==(const SampledTokenInfo&) const = default;
};

// The tail's sampled tokens for the entries of one micro-batch that wanted one, sent to the head.
struct TokenFrame {
    std::uint64_t epoch = 0;
    std::uint64_t batch_id = 0;
    std::vector<SampledTokenInfo> tokens;
    bool operator==(const TokenFrame&) const = default;
};

// Head → origin: the request was admitted (with `cached_tokens` of its prompt reused), and/or
// new tokens. The origin detokenizes and streams them to its client.
struct RequestUpdate {
    std::uint64_t request_id = 0;
    bool accepted = false;  // first update: admitted, prefill starts
    std::uint32_t cached_tokens = 0;
    std::vector<SampledTokenInfo> tokens;
    bool operator==(const RequestUpdate&) const = default;
};

// Origin → head: stop this request (client gone, stop string). Head → other stages: the request
// ended; free its KV.
struct Cancel {
    std::uint64_t request_id = 0;
    std::string reason;
    bool operator==(const Cancel&) const = default;
};

// Head → the other stages, along the pipeline (in order with the activations): what to do with
// cached prompt prefixes, so that a request whose prompt starts like an earlier one computes only
// the rest on every stage. Entry ids are chosen by the head and never equal a request id.
enum class KvPrefixOp : std::uint8_t {
    // Request `request_id` ended: keep its first `n_tokens` positions as entry `entry_id`
    // (instead of freeing them, as a Cancel would).
    kKeep = 1,
    // Before the first rows of new request `request_id`: its KV starts as a copy of the first
    // `n_tokens` positions of entry `entry_id`.
    kReuse = 2,
    // Entry `entry_id` was evicted: free it (`request_id` and `n_tokens` are 0).
    kDrop = 3,
};
inline constexpr std::uint8_t kMaxKvPrefixOp = 3;

struct KvPrefix {
    std::uint64_t epoch = 0;  // plan epoch; a stage ignores other plans' entries
    KvPrefixOp op = KvPrefixOp::kDrop;
    std::uint64_t request_id = 0;
    std::uint64_t entry_id = 0;
    std::uint32_t n_tokens = 0;
    bool operator==(const KvPrefix&) const = default;
};

struct ErrorFrame {
    std::uint32_t code = 0;        // for a request: node/'s error kind (status class), else 0
    std::uint64_t request_id = 0;  // 0: about the link, not a request
    std::string message;
    bool operator==(const ErrorFrame&) const = default;
};

enum class ByeReason : std::uint8_t { kShutdown = 0, kLeave = 1, kProtocolError = 2, kIdle = 3 };

struct Bye {
    ByeReason reason = ByeReason::kShutdown;
    std::string message;
    bool operator==(const Bye&) const = default;
};

using Message = std::variant<Hello, Heartbeat, PeerList, CapacityReport, PlanPropose, PlanAck,
                             PlanCommit, PlanAbort, RequestFrame, ActivationFrame, TokenFrame,
                             Cancel, ErrorFrame, Bye, RequestUpdate, KvPrefix>;

MsgType message_type(const Message& m);
const char* msg_type_name(MsgType t);

}  // namespace brigade::mesh
