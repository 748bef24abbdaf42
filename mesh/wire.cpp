#include "mesh/wire.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>

namespace brigade::mesh {
namespace {

// Bounds for counts inside bodies; the frame size limit bounds them too, these just say "sane".
constexpr std::size_t kMaxPeers = 4096;
constexpr std::size_t kMaxAddresses = 32;
constexpr std::size_t kMaxStages = 1024;
constexpr std::size_t kMaxLinks = 4096;
constexpr std::size_t kMaxBatchEntries = 65536;
constexpr std::size_t kMaxTopTokens = 64;

void put_id(ByteWriter& w, const NodeId& id) { w.array(id.bytes); }
NodeId get_id(ByteReader& r) { return NodeId{r.array<20>()}; }

void put_address(ByteWriter& w, const PeerAddress& a) {
    w.str(a.host);
    w.u16(a.port);
}
PeerAddress get_address(ByteReader& r) {
    PeerAddress a;
    a.host = r.str(253);
    a.port = r.u16();
    return a;
}

void encode_body(ByteWriter& w, const Hello& m) {
    w.u16(m.major);
    w.u16(m.minor);
    w.u64(m.capabilities);
    put_id(w, m.node_id);
    w.u16(m.listen_port);
    w.str(m.software);
    w.u64(m.incarnation);
}
void encode_body(ByteWriter& w, const Heartbeat& m) {
    w.u64(m.seq);
    w.u64(m.sent_us);
    w.u8(m.reply ? 1 : 0);
}
void encode_body(ByteWriter& w, const PeerList& m) {
    w.u32(static_cast<std::uint32_t>(m.peers.size()));
    for (const PeerInfo& p : m.peers) {
        put_id(w, p.id);
        w.u32(static_cast<std::uint32_t>(p.addresses.size()));
        for (const PeerAddress& a : p.addresses) put_address(w, a);
    }
}
void encode_body(ByteWriter& w, const CapacityReport& m) {
    put_id(w, m.node_id);
    w.u64(m.memory_bytes);
    w.str(m.backend);
    w.str(m.model_id);
    w.f64(m.seconds_per_layer);
    w.u32(static_cast<std::uint32_t>(m.links.size()));
    for (const LinkMeasurement& l : m.links) {
        put_id(w, l.peer);
        w.u32(l.rtt_us);
        w.f64(l.bandwidth_bytes_per_s);
    }
    w.u64(m.stage.epoch);
    w.u64(m.stage.steps);
    w.u64(m.stage.tokens);
    w.u32(m.stage.mean_step_us);
    w.u64(m.kv_bytes_per_token_per_layer);  // appended in minor 1; older decoders ignore it
    w.u64(m.link_resets);                   // appended in minor 2
}
void encode_body(ByteWriter& w, const PlanPropose& m) {
    w.u64(m.epoch);
    put_id(w, m.coordinator);
    w.str(m.model_id);
    w.u32(static_cast<std::uint32_t>(m.stages.size()));
    for (const StageAssignment& s : m.stages) {
        put_id(w, s.node);
        w.i32(s.first_layer);
        w.i32(s.last_layer);
    }
    w.f64(m.predicted_tok_s);
}
void encode_body(ByteWriter& w, const PlanAck& m) {
    w.u64(m.epoch);
    put_id(w, m.node_id);
    w.u8(static_cast<std::uint8_t>(m.status));
    w.u64(m.highest_epoch);
    w.str(m.message);
}
void encode_body(ByteWriter& w, const PlanCommit& m) {
    w.u64(m.epoch);
    put_id(w, m.coordinator);
}
void encode_body(ByteWriter& w, const PlanAbort& m) {
    w.u64(m.epoch);
    put_id(w, m.coordinator);
    w.str(m.reason);
}
void encode_body(ByteWriter& w, const RequestFrame& m) {
    w.u64(m.request_id);
    w.u64(m.epoch);
    put_id(w, m.origin);
    w.u32(static_cast<std::uint32_t>(m.tokens.size()));
    for (std::int32_t t : m.tokens) w.i32(t);
    w.u32(m.n_prompt);
    w.blob(m.setup);
}
void encode_body(ByteWriter& w, const ActivationFrame& m) {
    w.u64(m.epoch);
    w.u64(m.batch_id);
    w.i32(m.first_layer);
    w.u8(static_cast<std::uint8_t>(m.dtype));
    w.u32(m.hidden);
    w.u32(static_cast<std::uint32_t>(m.entries.size()));
    for (const ActivationEntry& e : m.entries) {
        w.u64(e.request_id);
        w.i32(e.pos0);
        w.u32(e.n_tokens);
        w.u8(e.wants_token ? 1 : 0);
        for (std::int32_t t : e.tokens) w.i32(t);  // [n_tokens] by contract
        w.blob(e.setup);
    }
    w.blob(m.payload);
}
void put_sampled(ByteWriter& w, const SampledTokenInfo& t) {
    w.u64(t.request_id);
    w.i32(t.token);
    w.f32(t.logprob);
    w.u32(static_cast<std::uint32_t>(t.top.size()));
    for (const TopToken& tt : t.top) {
        w.i32(tt.token);
        w.f32(tt.logprob);
    }
    w.u8(static_cast<std::uint8_t>(t.finish));
}
void encode_body(ByteWriter& w, const TokenFrame& m) {
    w.u64(m.epoch);
    w.u64(m.batch_id);
    w.u32(static_cast<std::uint32_t>(m.tokens.size()));
    for (const SampledTokenInfo& t : m.tokens) put_sampled(w, t);
}
void encode_body(ByteWriter& w, const RequestUpdate& m) {
    w.u64(m.request_id);
    w.u8(m.accepted ? 1 : 0);
    w.u32(m.cached_tokens);
    w.u32(static_cast<std::uint32_t>(m.tokens.size()));
    for (const SampledTokenInfo& t : m.tokens) put_sampled(w, t);
}
void encode_body(ByteWriter& w, const Cancel& m) {
    w.u64(m.request_id);
    w.str(m.reason);
}
void encode_body(ByteWriter& w, const KvPrefix& m) {
    w.u64(m.epoch);
    w.u8(static_cast<std::uint8_t>(m.op));
    w.u64(m.request_id);
    w.u64(m.entry_id);
    w.u32(m.n_tokens);
}
void encode_body(ByteWriter& w, const ErrorFrame& m) {
    w.u32(m.code);
    w.u64(m.request_id);
    w.str(m.message);
}
void encode_body(ByteWriter& w, const Bye& m) {
    w.u8(static_cast<std::uint8_t>(m.reason));
    w.str(m.message);
}

Error bad(MsgType t, const std::string& what) {
    return make_error(errc::bad_frame, std::string(msg_type_name(t)) + ": " + what);
}

bool get_bool(ByteReader& r) {
    const std::uint8_t v = r.u8();
    if (v > 1) r.fail();
    return v == 1;
}

Result<Message> decode_hello(ByteReader& r) {
    Hello m;
    m.major = r.u16();
    m.minor = r.u16();
    m.capabilities = r.u64();
    m.node_id = get_id(r);
    m.listen_port = r.u16();
    m.software = r.str(256);
    // Appended in minor 2: a minor-1 Hello ends before it.
    if (r.ok() && r.remaining() >= 8) m.incarnation = r.u64();
    if (!r.ok()) return bad(MsgType::kHello, "truncated or oversized field");
    return Message{std::move(m)};
}
Result<Message> decode_heartbeat(ByteReader& r) {
    Heartbeat m;
    m.seq = r.u64();
    m.sent_us = r.u64();
    m.reply = get_bool(r);
    if (!r.ok()) return bad(MsgType::kHeartbeat, "truncated or bad flag");
    return Message{m};
}
Result<Message> decode_peer_list(ByteReader& r) {
    PeerList m;
    // A peer takes at least 20 (id) + 4 (address count) bytes.
    const std::size_t n = r.count(kMaxPeers, 24);
    m.peers.reserve(n);
    for (std::size_t i = 0; i < n && r.ok(); ++i) {
        PeerInfo p;
        p.id = get_id(r);
        const std::size_t na = r.count(kMaxAddresses, 6);  // u32 host length + u16 port
        for (std::size_t j = 0; j < na && r.ok(); ++j) p.addresses.push_back(get_address(r));
        m.peers.push_back(std::move(p));
    }
    if (!r.ok()) return bad(MsgType::kPeerList, "truncated or too many entries");
    return Message{std::move(m)};
}
Result<Message> decode_capacity(ByteReader& r) {
    CapacityReport m;
    m.node_id = get_id(r);
    m.memory_bytes = r.u64();
    m.backend = r.str(64);
    m.model_id = r.str(1024);
    m.seconds_per_layer = r.f64();
    const std::size_t n = r.count(kMaxLinks, 32);
    m.links.reserve(n);
    for (std::size_t i = 0; i < n && r.ok(); ++i) {
        LinkMeasurement l;
        l.peer = get_id(r);
        l.rtt_us = r.u32();
        l.bandwidth_bytes_per_s = r.f64();
        m.links.push_back(l);
    }
    m.stage.epoch = r.u64();
    m.stage.steps = r.u64();
    m.stage.tokens = r.u64();
    m.stage.mean_step_us = r.u32();
    // Appended later in minor 1: a report from a node without it ends here.
    if (r.ok() && r.remaining() >= 8) m.kv_bytes_per_token_per_layer = r.u64();
    if (r.ok() && r.remaining() >= 8) m.link_resets = r.u64();  // minor 2
    if (!r.ok()) return bad(MsgType::kCapacity, "truncated or oversized field");
    return Message{std::move(m)};
}
Result<Message> decode_plan_propose(ByteReader& r) {
    PlanPropose m;
    m.epoch = r.u64();
    m.coordinator = get_id(r);
    m.model_id = r.str(1024);
    const std::size_t n = r.count(kMaxStages, 28);
    m.stages.reserve(n);
    for (std::size_t i = 0; i < n && r.ok(); ++i) {
        StageAssignment s;
        s.node = get_id(r);
        s.first_layer = r.i32();
        s.last_layer = r.i32();
        m.stages.push_back(s);
    }
    m.predicted_tok_s = r.f64();
    if (!r.ok()) return bad(MsgType::kPlanPropose, "truncated or too many stages");
    return Message{std::move(m)};
}
Result<Message> decode_plan_ack(ByteReader& r) {
    PlanAck m;
    m.epoch = r.u64();
    m.node_id = get_id(r);
    const std::uint8_t status = r.u8();
    m.highest_epoch = r.u64();
    m.message = r.str(4096);
    if (!r.ok()) return bad(MsgType::kPlanAck, "truncated or oversized field");
    if (status > static_cast<std::uint8_t>(AckStatus::kNotCoordinator)) {
        return bad(MsgType::kPlanAck, "unknown status " + std::to_string(status));
    }
    m.status = static_cast<AckStatus>(status);
    return Message{std::move(m)};
}
Result<Message> decode_plan_commit(ByteReader& r) {
    PlanCommit m;
    m.epoch = r.u64();
    m.coordinator = get_id(r);
    if (!r.ok()) return bad(MsgType::kPlanCommit, "truncated");
    return Message{m};
}
Result<Message> decode_plan_abort(ByteReader& r) {
    PlanAbort m;
    m.epoch = r.u64();
    m.coordinator = get_id(r);
    m.reason = r.str(4096);
    if (!r.ok()) return bad(MsgType::kPlanAbort, "truncated or oversized field");
    return Message{std::move(m)};
}
Result<Message> decode_request(ByteReader& r, const WireLimits& limits) {
    RequestFrame m;
    m.request_id = r.u64();
    m.epoch = r.u64();
    m.origin = get_id(r);
    const std::size_t n = r.count(limits.max_token_bytes / 4, 4);
    m.tokens.reserve(n);
    for (std::size_t i = 0; i < n; ++i) m.tokens.push_back(r.i32());
    m.n_prompt = r.u32();
    m.setup = r.blob(limits.max_token_bytes);
    if (!r.ok()) return bad(MsgType::kRequest, "truncated or oversized field");
    if (m.n_prompt == 0 || m.n_prompt > m.tokens.size()) {
        return bad(MsgType::kRequest, "n_prompt " + std::to_string(m.n_prompt) +
                                          " is not within 1.." + std::to_string(m.tokens.size()));
    }
    return Message{std::move(m)};
}
Result<Message> decode_activation(ByteReader& r, const WireLimits& limits) {
    ActivationFrame m;
    m.epoch = r.u64();
    m.batch_id = r.u64();
    m.first_layer = r.i32();
    const std::uint8_t dtype = r.u8();
    m.hidden = r.u32();
    if (!r.ok()) return bad(MsgType::kActivation, "truncated header");
    if (dtype > static_cast<std::uint8_t>(ActivationDType::kF32)) {
        return bad(MsgType::kActivation, "unknown dtype " + std::to_string(dtype));
    }
    m.dtype = static_cast<ActivationDType>(dtype);
    const std::size_t n_entries = r.count(kMaxBatchEntries, 21);
    m.entries.reserve(n_entries);
    std::uint64_t rows = 0;
    for (std::size_t i = 0; i < n_entries && r.ok(); ++i) {
        ActivationEntry e;
        e.request_id = r.u64();
        e.pos0 = r.i32();
        e.n_tokens = r.u32();
        e.wants_token = get_bool(r);
        if (r.ok() && (e.n_tokens == 0 || e.pos0 < 0)) {
            return bad(MsgType::kActivation,
                       "entry " + std::to_string(i) + " has no rows or a negative position");
        }
        // Reserve only what the bytes left can hold.
        if (r.ok() && e.n_tokens > r.remaining() / 4) {
            return bad(MsgType::kActivation, "entry " + std::to_string(i) + " is truncated");
        }
        e.tokens.reserve(e.n_tokens);
        for (std::uint32_t k = 0; k < e.n_tokens && r.ok(); ++k) e.tokens.push_back(r.i32());
        e.setup = r.blob(limits.max_token_bytes);
        rows += e.n_tokens;
        m.entries.push_back(std::move(e));
    }
    if (!r.ok()) return bad(MsgType::kActivation, "truncated or oversized entries");
    // Checked in 64 bits: rows < 2^38 and hidden < 2^32, times 4, cannot overflow.
    const std::uint64_t expected_payload = rows * m.hidden * activation_dtype_bytes(m.dtype);
    if (expected_payload > limits.max_activation_bytes) {
        return bad(MsgType::kActivation,
                   "payload of " + std::to_string(expected_payload) + " bytes exceeds the limit");
    }
    m.payload = r.blob(expected_payload);
    if (!r.ok()) return bad(MsgType::kActivation, "truncated or oversized payload");
    if (m.payload.size() != expected_payload) {
        return bad(MsgType::kActivation, "payload has " + std::to_string(m.payload.size()) +
                                             " bytes, rows*hidden*dtype needs " +
                                             std::to_string(expected_payload));
    }
    return Message{std::move(m)};
}
bool get_sampled(ByteReader& r, SampledTokenInfo& t) {
    t.request_id = r.u64();
    t.token = r.i32();
    t.logprob = r.f32();
    const std::size_t n = r.count(kMaxTopTokens, 8);
    t.top.reserve(n);
    for (std::size_t i = 0; i < n && r.ok(); ++i) {
        TopToken tt;
        tt.token = r.i32();
        tt.logprob = r.f32();
        t.top.push_back(tt);
    }
    const std::uint8_t finish = r.u8();
    if (!r.ok() || finish > static_cast<std::uint8_t>(TokenFinish::kLength)) return false;
    t.finish = static_cast<TokenFinish>(finish);
    return true;
}
Result<Message> decode_token(ByteReader& r) {
    TokenFrame m;
    m.epoch = r.u64();
    m.batch_id = r.u64();
    const std::size_t n = r.count(kMaxBatchEntries, 21);
    m.tokens.resize(n);
    for (auto& t : m.tokens) {
        if (!get_sampled(r, t)) return bad(MsgType::kToken, "truncated or invalid token entry");
    }
    if (!r.ok()) return bad(MsgType::kToken, "truncated or too many tokens");
    return Message{std::move(m)};
}
Result<Message> decode_request_update(ByteReader& r) {
    RequestUpdate m;
    m.request_id = r.u64();
    m.accepted = get_bool(r);
    m.cached_tokens = r.u32();
    const std::size_t n = r.count(kMaxBatchEntries, 21);
    m.tokens.resize(n);
    for (auto& t : m.tokens) {
        if (!get_sampled(r, t)) {
            return bad(MsgType::kRequestUpdate, "truncated or invalid token entry");
        }
    }
    if (!r.ok()) return bad(MsgType::kRequestUpdate, "truncated or too many tokens");
    return Message{std::move(m)};
}
Result<Message> decode_cancel(ByteReader& r) {
    Cancel m;
    m.request_id = r.u64();
    m.reason = r.str(4096);
    if (!r.ok()) return bad(MsgType::kCancel, "truncated or oversized field");
    return Message{std::move(m)};
}
Result<Message> decode_kv_prefix(ByteReader& r) {
    KvPrefix m;
    m.epoch = r.u64();
    const std::uint8_t op = r.u8();
    m.request_id = r.u64();
    m.entry_id = r.u64();
    m.n_tokens = r.u32();
    if (!r.ok()) return bad(MsgType::kKvPrefix, "truncated");
    if (op == 0 || op > kMaxKvPrefixOp) return bad(MsgType::kKvPrefix, "unknown operation");
    m.op = static_cast<KvPrefixOp>(op);
    if (m.entry_id == 0) return bad(MsgType::kKvPrefix, "entry id 0");
    if ((m.request_id == 0) != (m.op == KvPrefixOp::kDrop)) {
        return bad(MsgType::kKvPrefix, "a request id belongs to keep and reuse only");
    }
    return Message{std::move(m)};
}
Result<Message> decode_error(ByteReader& r) {
    ErrorFrame m;
    m.code = r.u32();
    m.request_id = r.u64();
    m.message = r.str(16384);
    if (!r.ok()) return bad(MsgType::kError, "truncated or oversized field");
    return Message{std::move(m)};
}
Result<Message> decode_bye(ByteReader& r) {
    Bye m;
    const std::uint8_t reason = r.u8();
    m.message = r.str(4096);
    if (!r.ok()) return bad(MsgType::kBye, "truncated or oversized field");
    if (reason > static_cast<std::uint8_t>(ByeReason::kIdle)) {
        return bad(MsgType::kBye, "unknown reason " + std::to_string(reason));
    }
    m.reason = static_cast<ByeReason>(reason);
    return Message{std::move(m)};
}

}  // namespace

MsgType message_type(const Message& m) {
    // Variant alternatives are declared in MsgType order, starting at kHello = 1.
    return static_cast<MsgType>(m.index() + 1);
}

const char* msg_type_name(MsgType t) {
    switch (t) {
        case MsgType::kHello:
            return "Hello";
        case MsgType::kHeartbeat:
            return "Heartbeat";
        case MsgType::kPeerList:
            return "PeerList";
        case MsgType::kCapacity:
            return "Capacity";
        case MsgType::kPlanPropose:
            return "PlanPropose";
        case MsgType::kPlanAck:
            return "PlanAck";
        case MsgType::kPlanCommit:
            return "PlanCommit";
        case MsgType::kPlanAbort:
            return "PlanAbort";
        case MsgType::kRequest:
            return "Request";
        case MsgType::kActivation:
            return "Activation";
        case MsgType::kToken:
            return "Token";
        case MsgType::kCancel:
            return "Cancel";
        case MsgType::kError:
            return "Error";
        case MsgType::kBye:
            return "Bye";
        case MsgType::kRequestUpdate:
            return "RequestUpdate";
        case MsgType::kKvPrefix:
            return "KvPrefix";
    }
    return "?";
}

std::uint32_t WireLimits::limit_for(MsgType t) const {
    switch (t) {
        case MsgType::kActivation:
            return max_activation_bytes;
        case MsgType::kRequest:
        case MsgType::kToken:
        case MsgType::kRequestUpdate:
            return max_token_bytes;
        default:
            return max_control_bytes;
    }
}

void append_frame(Bytes& out, const Message& m) {
    const std::size_t header_at = out.size();
    ByteWriter w(out);
    w.u32(0);  // patched below, once the body size is known
    w.u16(static_cast<std::uint16_t>(message_type(m)));
    w.u16(0);
    std::visit([&](const auto& body) { encode_body(w, body); }, m);
    const std::uint32_t body_bytes =
        static_cast<std::uint32_t>(out.size() - header_at - kFrameHeaderBytes);
    for (int i = 0; i < 4; ++i)
        out[header_at + i] = static_cast<std::uint8_t>(body_bytes >> (8 * i));
}

Bytes encode_frame(const Message& m) {
    Bytes out;
    append_frame(out, m);
    return out;
}

Result<Message> decode_body(MsgType type, ByteSpan body, const WireLimits& limits) {
    ByteReader r(body);
    switch (type) {
        case MsgType::kHello:
            return decode_hello(r);
        case MsgType::kHeartbeat:
            return decode_heartbeat(r);
        case MsgType::kPeerList:
            return decode_peer_list(r);
        case MsgType::kCapacity:
            return decode_capacity(r);
        case MsgType::kPlanPropose:
            return decode_plan_propose(r);
        case MsgType::kPlanAck:
            return decode_plan_ack(r);
        case MsgType::kPlanCommit:
            return decode_plan_commit(r);
        case MsgType::kPlanAbort:
            return decode_plan_abort(r);
        case MsgType::kRequest:
            return decode_request(r, limits);
        case MsgType::kActivation:
            return decode_activation(r, limits);
        case MsgType::kToken:
            return decode_token(r);
        case MsgType::kCancel:
            return decode_cancel(r);
        case MsgType::kError:
            return decode_error(r);
        case MsgType::kBye:
            return decode_bye(r);
        case MsgType::kRequestUpdate:
            return decode_request_update(r);
        case MsgType::kKvPrefix:
            return decode_kv_prefix(r);
    }
    return make_error(errc::unknown_type,
                      "frame type " + std::to_string(static_cast<unsigned>(type)) + " is unknown");
}

void FrameDecoder::feed(ByteSpan bytes) {
    if (failed_) return;
    // Compact once the consumed prefix dominates, so a long-lived link does not grow forever.
    if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
        buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(offset_));
        offset_ = 0;
    }
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

Result<std::optional<Message>> FrameDecoder::next() {
    if (failed_) return *failed_;
    const std::size_t avail = buffer_.size() - offset_;
    if (avail < kFrameHeaderBytes) return std::optional<Message>{};
    ByteReader h(ByteSpan(buffer_.data() + offset_, kFrameHeaderBytes));
    const std::uint32_t body_bytes = h.u32();
    const std::uint16_t type = h.u16();
    const std::uint16_t flags = h.u16();
    if (type == 0 || type > kMaxMsgType) {
        failed_ =
            make_error(errc::unknown_type, "frame type " + std::to_string(type) + " is unknown");
        return *failed_;
    }
    const MsgType t = static_cast<MsgType>(type);
    if (flags != 0) {
        failed_ = make_error(errc::bad_frame, std::string(msg_type_name(t)) + ": reserved flags " +
                                                  std::to_string(flags) + " set");
        return *failed_;
    }
    // The body limit adds room for the fields around an activation payload: entries, their token
    // ids (4 bytes a row, against >= 64 payload bytes a row) and setups.
    const std::uint64_t limit = static_cast<std::uint64_t>(limits_.limit_for(t)) +
                                (t == MsgType::kActivation ? limits_.max_activation_bytes / 8 +
                                                                 limits_.max_token_bytes + 4096
                                                           : 0);
    if (body_bytes > limit) {
        failed_ =
            make_error(errc::frame_too_large,
                       std::string(msg_type_name(t)) + " frame of " + std::to_string(body_bytes) +
                           " bytes exceeds the limit of " + std::to_string(limit));
        return *failed_;
    }
    if (avail < kFrameHeaderBytes + body_bytes) {
        // The header is valid: reserving the frame now avoids repeated regrowth of big frames.
        buffer_.reserve(offset_ + kFrameHeaderBytes + body_bytes);
        return std::optional<Message>{};
    }
    const ByteSpan body(buffer_.data() + offset_ + kFrameHeaderBytes, body_bytes);
    auto m = decode_body(t, body, limits_);
    offset_ += kFrameHeaderBytes + body_bytes;
    if (offset_ == buffer_.size()) {
        buffer_.clear();
        offset_ = 0;
    }
    if (!m) {
        failed_ = m.error();
        return *failed_;
    }
    return std::optional<Message>{std::move(*m)};
}

std::uint16_t f32_to_bf16(float f) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
        return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
    }
    const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
    return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_f32(std::uint16_t b) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

void f32_to_bf16_bytes(std::span<const float> in, std::uint8_t* out) {
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint16_t v = f32_to_bf16(in[i]);
        out[2 * i] = static_cast<std::uint8_t>(v);
        out[2 * i + 1] = static_cast<std::uint8_t>(v >> 8);
    }
}

void bf16_bytes_to_f32(const std::uint8_t* in, std::span<float> out) {
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = bf16_to_f32(static_cast<std::uint16_t>(in[2 * i] | (in[2 * i + 1] << 8)));
    }
}

std::vector<std::uint8_t> encode_activations(std::span<const float> hidden, ActivationDType dtype) {
    std::vector<std::uint8_t> out(hidden.size() * activation_dtype_bytes(dtype));
    if (dtype == ActivationDType::kBF16) {
        f32_to_bf16_bytes(hidden, out.data());
    } else {
        for (std::size_t i = 0; i < hidden.size(); ++i) {
            const std::uint32_t v = std::bit_cast<std::uint32_t>(hidden[i]);
            for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<std::uint8_t>(v >> (8 * b));
        }
    }
    return out;
}

Result<std::vector<float>> decode_activations(const ActivationFrame& frame) {
    const std::size_t n = static_cast<std::size_t>(frame.rows()) * frame.hidden;
    if (frame.payload.size() != n * activation_dtype_bytes(frame.dtype)) {
        return make_error(errc::bad_frame, "activation payload size does not match its shape");
    }
    std::vector<float> out(n);
    if (frame.dtype == ActivationDType::kBF16) {
        bf16_bytes_to_f32(frame.payload.data(), out);
    } else {
        const std::uint8_t* p = frame.payload.data();
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t v = static_cast<std::uint32_t>(p[4 * i]) |
                                    (static_cast<std::uint32_t>(p[4 * i + 1]) << 8) |
                                    (static_cast<std::uint32_t>(p[4 * i + 2]) << 16) |
                                    (static_cast<std::uint32_t>(p[4 * i + 3]) << 24);
            out[i] = std::bit_cast<float>(v);
        }
    }
    return out;
}

}  // namespace brigade::mesh
