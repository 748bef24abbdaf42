// Frame codec: round trips of every message, malformed input of every kind, BF16 conversion.

#include "mesh/wire.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace brigade::mesh {
namespace {

NodeId id_of(std::uint8_t fill) {
    NodeId id;
    id.bytes.fill(fill);
    return id;
}

std::vector<Message> every_message() {
    ActivationFrame act;
    act.epoch = 3;
    act.batch_id = 77;
    act.first_layer = 12;
    act.dtype = ActivationDType::kBF16;
    act.hidden = 4;
    act.entries = {ActivationEntry{5, 0, 2, false, {10, 11}, {1, 2, 3}},
                   ActivationEntry{6, 7, 1, true, {12}, {}}};
    act.payload.resize(3 * 4 * 2);
    for (std::size_t i = 0; i < act.payload.size(); ++i)
        act.payload[i] = static_cast<std::uint8_t>(i);
    return {
        Hello{1, 2, kCapActivationsBf16 | kCapApi, id_of(1), 8178, "brigade/0.1.0",
              0x0123456789abcdefULL},
        Heartbeat{42, 123456789, true},
        PeerList{
            {PeerInfo{id_of(2), {{"10.0.0.2", 8178}, {"fe80::1", 9000}}}, PeerInfo{id_of(3), {}}}},
        CapacityReport{id_of(4),
                       24000000000ull,
                       "cpu",
                       "Qwen/Qwen2.5-0.5B",
                       0.00125,
                       {LinkMeasurement{id_of(5), 350, 1.1e8}},
                       StageStats{7, 100, 4000, 1250},
                       12288,
                       3},
        PlanPropose{7, id_of(1), "demo", {{id_of(1), 0, 10}, {id_of(2), 10, 24}}, 31.5},
        PlanAck{7, id_of(2), AckStatus::kStale, 9, "epoch 7 <= 9"},
        PlanCommit{7, id_of(1)},
        PlanAbort{7, id_of(1), "timed out"},
        RequestFrame{11, 7, id_of(3), {1, 2, 3, -1}, 3, {9, 9}},
        act,
        TokenFrame{7,
                   77,
                   {SampledTokenInfo{
                        11, 1234, -0.25f, {{1234, -0.25f}, {5, -3.5f}}, TokenFinish::kContinue},
                    SampledTokenInfo{12, -1, 0.0f, {}, TokenFinish::kStop}}},
        Cancel{11, "client disconnected"},
        ErrorFrame{503, 11, "no pipeline"},
        Bye{ByeReason::kLeave, "SIGTERM"},
        RequestUpdate{11, true, 2, {SampledTokenInfo{11, 40, -0.5f, {}, TokenFinish::kLength}}},
        KvPrefix{7, KvPrefixOp::kReuse, 11, (1ull << 63) | 5, 300},
    };
}

Result<std::optional<Message>> decode_one(const Bytes& bytes, WireLimits limits = {}) {
    FrameDecoder d(limits);
    d.feed(bytes);
    return d.next();
}

TEST(Wire, EveryMessageRoundTrips) {
    const auto messages = every_message();
    ASSERT_EQ(messages.size(), static_cast<std::size_t>(kMaxMsgType));
    for (const Message& m : messages) {
        const Bytes bytes = encode_frame(m);
        auto d = decode_one(bytes);
        ASSERT_TRUE(d) << msg_type_name(message_type(m)) << ": " << d.error().what();
        ASSERT_TRUE(d->has_value()) << msg_type_name(message_type(m));
        EXPECT_EQ(**d, m) << msg_type_name(message_type(m));
    }
}

TEST(Wire, HeaderIsExplicitLittleEndian) {
    const Bytes b = encode_frame(Heartbeat{0x0102030405060708ull, 0, false});
    ASSERT_EQ(b.size(), kFrameHeaderBytes + 17);
    EXPECT_EQ(b[0], 17);  // body length, LE
    EXPECT_EQ(b[1], 0);
    EXPECT_EQ(b[4], static_cast<std::uint8_t>(MsgType::kHeartbeat));
    EXPECT_EQ(b[5], 0);
    EXPECT_EQ(b[8], 0x08);  // seq, least significant byte first
    EXPECT_EQ(b[15], 0x01);
}

TEST(Wire, AllMessagesInOneStreamFedByteByByte) {
    Bytes stream;
    const auto messages = every_message();
    for (const Message& m : messages) append_frame(stream, m);
    FrameDecoder d;
    std::vector<Message> got;
    for (std::uint8_t byte : stream) {
        d.feed(ByteSpan(&byte, 1));
        auto next = d.next();
        ASSERT_TRUE(next) << next.error().what();
        if (*next) got.push_back(std::move(**next));
    }
    EXPECT_EQ(got, messages);
    EXPECT_EQ(d.buffered_bytes(), 0u);
}

TEST(Wire, TruncationAtEveryByteNeedsMoreAndNeverYieldsAFrame) {
    for (const Message& m : every_message()) {
        const Bytes bytes = encode_frame(m);
        for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
            FrameDecoder d;
            d.feed(ByteSpan(bytes).first(cut));
            auto next = d.next();
            ASSERT_TRUE(next) << msg_type_name(message_type(m)) << " cut " << cut;
            EXPECT_FALSE(next->has_value());
            EXPECT_EQ(d.buffered_bytes(), cut);
        }
    }
}

TEST(Wire, ShortenedBodyWithMatchingLengthIsAPreciseError) {
    // The header claims a shorter body: the body decoder runs out of fields.
    for (const Message& m : every_message()) {
        Bytes bytes = encode_frame(m);
        const std::uint32_t body = static_cast<std::uint32_t>(bytes.size() - kFrameHeaderBytes);
        for (std::uint32_t n = 0; n < body; ++n) {
            Bytes cut(bytes.begin(), bytes.begin() + kFrameHeaderBytes + n);
            for (int i = 0; i < 4; ++i) cut[i] = static_cast<std::uint8_t>(n >> (8 * i));
            auto r = decode_one(cut);
            // Last fields appended after nodes that do not send them (Capacity's KV bytes per
            // token in minor 1 and link resets in 2, Hello's incarnation in 2): without them, or
            // with a part of one (bytes a decoder ignores), the message reads as such a node's,
            // with 0 there.
            std::optional<Message> older;
            if (const auto* report = std::get_if<CapacityReport>(&m); report && n + 16 >= body) {
                CapacityReport old = *report;
                old.link_resets = 0;
                if (n + 8 < body) old.kv_bytes_per_token_per_layer = 0;
                older = old;
            } else if (const auto* hello = std::get_if<Hello>(&m); hello && n + 8 >= body) {
                Hello old = *hello;
                old.incarnation = 0;
                older = old;
            }
            if (older) {
                ASSERT_TRUE(r && r->has_value())
                    << msg_type_name(message_type(m)) << " with " << n << "/" << body;
                EXPECT_EQ(**r, *older) << n << "/" << body;
            } else if (r && r->has_value()) {
                // Only possible when the dropped bytes were a trailing variable-length field
                // that decodes as "shorter": never for fixed fields. Messages whose last field is
                // a blob/string/count cannot decode with fewer bytes either (length prefix).
                ADD_FAILURE() << msg_type_name(message_type(m)) << " decoded with " << n << "/"
                              << body << " body bytes";
            } else if (!r) {
                EXPECT_EQ(r.error().code, errc::bad_frame);
            }
        }
    }
}

TEST(Wire, OversizeLengthIsRejectedBeforeTheBodyArrives) {
    WireLimits limits;
    limits.max_control_bytes = 1024;
    Bytes header = {0x01, 0x04, 0x00, 0x00, static_cast<std::uint8_t>(MsgType::kPlanPropose),
                    0,    0,    0};
    // 1025 bytes claimed, limit 1024: rejected from the 8 header bytes alone.
    auto r = decode_one(header, limits);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::frame_too_large);
    // A huge activation claim (4 GiB - 1) is rejected without reserving it.
    Bytes huge = {0xff, 0xff, 0xff, 0xff, static_cast<std::uint8_t>(MsgType::kActivation), 0, 0, 0};
    auto h = decode_one(huge);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code, errc::frame_too_large);
}

TEST(Wire, UnknownTypesAndFlagsAreRejected) {
    for (std::uint16_t type : {0, kMaxMsgType + 1, 0xffff}) {
        Bytes b = {
            0, 0, 0, 0, static_cast<std::uint8_t>(type), static_cast<std::uint8_t>(type >> 8),
            0, 0};
        auto r = decode_one(b);
        ASSERT_FALSE(r) << type;
        EXPECT_EQ(r.error().code, errc::unknown_type);
    }
    Bytes flagged = encode_frame(Heartbeat{});
    flagged[6] = 1;
    auto r = decode_one(flagged);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::bad_frame);
}

TEST(Wire, ErrorsAreSticky) {
    FrameDecoder d;
    d.feed(Bytes{0, 0, 0, 0, 0xee, 0, 0, 0});
    EXPECT_FALSE(d.next());
    d.feed(encode_frame(Heartbeat{}));
    EXPECT_FALSE(d.next());
    EXPECT_TRUE(d.failed());
}

TEST(Wire, NewerMinorVersionsMayAppendFields) {
    Bytes b = encode_frame(Hello{1, 7, 0, id_of(9), 1, "future", 42});
    b.insert(b.end(), {0xde, 0xad, 0xbe, 0xef});
    b[0] = static_cast<std::uint8_t>(b[0] + 4);
    auto r = decode_one(b);
    ASSERT_TRUE(r && *r);
    EXPECT_EQ(std::get<Hello>(**r).minor, 7);
    EXPECT_EQ(std::get<Hello>(**r).incarnation, 42u);
}

TEST(Wire, ActivationShapeIsChecked) {
    ActivationFrame a = std::get<ActivationFrame>(every_message()[9]);
    auto expect_bad = [](const ActivationFrame& f, const char* what) {
        auto r = decode_one(encode_frame(f));
        ASSERT_FALSE(r) << what;
        EXPECT_EQ(r.error().code, errc::bad_frame) << what;
    };
    ActivationFrame f = a;
    f.payload.pop_back();
    expect_bad(f, "payload too short");
    f = a;
    f.entries[1].n_tokens = 2;  // rows no longer match the payload
    f.entries[1].tokens.push_back(13);
    expect_bad(f, "rows count");
    f = a;
    f.entries[0].n_tokens = 0;
    f.entries[0].tokens.clear();
    expect_bad(f, "empty entry");
    f = a;
    f.dtype = static_cast<ActivationDType>(7);
    expect_bad(f, "dtype");
    // n_tokens * hidden over the activation limit, rejected from the fields before the payload.
    WireLimits small;
    small.max_activation_bytes = 16;
    auto r = decode_one(encode_frame(a), small);
    ASSERT_FALSE(r);
}

TEST(Wire, BadEnumsAndBoolsAreRejected) {
    Bytes ack = encode_frame(PlanAck{1, id_of(1), AckStatus::kReady, 1, ""});
    ack[kFrameHeaderBytes + 8 + 20] = 9;  // status
    EXPECT_FALSE(decode_one(ack));
    Bytes hb = encode_frame(Heartbeat{1, 2, false});
    hb[kFrameHeaderBytes + 16] = 2;  // bool
    EXPECT_FALSE(decode_one(hb));
}

TEST(Wire, KvPrefixFieldsAreChecked) {
    auto decodes = [](const KvPrefix& m) { return static_cast<bool>(decode_one(encode_frame(m))); };
    EXPECT_TRUE(decodes(KvPrefix{3, KvPrefixOp::kKeep, 8, 9, 10}));
    EXPECT_TRUE(decodes(KvPrefix{3, KvPrefixOp::kDrop, 0, 9, 0}));
    EXPECT_FALSE(decodes(KvPrefix{3, KvPrefixOp::kDrop, 8, 9, 0})) << "drop names no request";
    EXPECT_FALSE(decodes(KvPrefix{3, KvPrefixOp::kReuse, 0, 9, 4})) << "reuse for no request";
    EXPECT_FALSE(decodes(KvPrefix{3, KvPrefixOp::kKeep, 8, 0, 4})) << "entry 0";
    Bytes b = encode_frame(KvPrefix{3, KvPrefixOp::kKeep, 8, 9, 10});
    b[kFrameHeaderBytes + 8] = 4;  // op
    auto r = decode_one(b);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::bad_frame);
}

TEST(Wire, LyingCountsDoNotAllocate) {
    // A PeerList claiming 4095 peers in a 4-byte body fails on the count check itself.
    Bytes b = {4,    0,    0, 0, static_cast<std::uint8_t>(MsgType::kPeerList), 0, 0, 0,
               0xff, 0x0f, 0, 0};
    auto r = decode_one(b);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::bad_frame);
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to even (1.0).
    EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
    // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
    EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
    // Just above halfway rounds up.
    EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    // A signalling NaN whose payload lives only in the low bits stays NaN.
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

TEST(Bf16, ActivationPayloadsRoundTrip) {
    std::vector<float> h(64);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::sin(static_cast<float>(i)) * 100.0f;
    ActivationFrame f;
    f.entries = {ActivationEntry{1, 0, 4, true, {1, 2, 3, 4}, {}}};
    f.hidden = 16;
    f.dtype = ActivationDType::kF32;
    f.payload = encode_activations(h, f.dtype);
    auto exact = decode_activations(f);
    ASSERT_TRUE(exact);
    EXPECT_EQ(*exact, h);
    f.dtype = ActivationDType::kBF16;
    f.payload = encode_activations(h, f.dtype);
    EXPECT_EQ(f.payload.size(), 128u);
    auto approx = decode_activations(f);
    ASSERT_TRUE(approx);
    for (std::size_t i = 0; i < h.size(); ++i) {
        EXPECT_NEAR((*approx)[i], h[i], std::abs(h[i]) / 256.0f + 1e-30f);  // 8-bit mantissa
    }
    f.payload.pop_back();
    EXPECT_FALSE(decode_activations(f));
}

}  // namespace
}  // namespace brigade::mesh
