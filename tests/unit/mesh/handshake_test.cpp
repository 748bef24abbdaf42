// The Brigade link handshake (XXpsk3 + identity binding + confirmation) and the encrypted record
// layer, run in memory.

#include "mesh/handshake.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "mesh/secure_channel.hpp"
#include "tests/unit/mesh/test_hex.hpp"

namespace brigade::mesh {
namespace {

using test::bytes_of;

MeshSecret secret_of(std::uint8_t fill) {
    MeshSecret s{};
    s.fill(fill);
    return s;
}

struct Transcript {
    std::vector<Bytes> messages;  // msg1, msg2, msg3, ready
};

// Runs a handshake; `tamper(index, bytes)` may alter message `index` in flight. Returns the
// first error seen by either side, or nothing on success.
struct HandshakeRun {
    std::optional<Error> initiator_error;
    std::optional<Error> responder_error;
    bool initiator_done = false;
    bool responder_done = false;
    Transcript transcript;
    std::optional<HandshakeOutcome> initiator;
    std::optional<HandshakeOutcome> responder;
};

HandshakeRun run_handshake(const NodeKey& ki, const MeshSecret& pi, const NodeKey& kr,
                           const MeshSecret& pr,
                           const std::function<void(std::size_t, Bytes&)>& tamper = {}) {
    HandshakeRun run;
    LinkHandshake i(LinkHandshake::Role::kInitiator, ki, pi);
    LinkHandshake r(LinkHandshake::Role::kResponder, kr, pr);
    auto m = i.start();
    EXPECT_TRUE(r.start());
    if (!m) {
        run.initiator_error = m.error();
        return run;
    }
    Bytes in_flight = *m;
    bool to_responder = true;
    for (std::size_t index = 0; index < 8 && !in_flight.empty(); ++index) {
        if (tamper) tamper(index, in_flight);
        run.transcript.messages.push_back(in_flight);
        LinkHandshake& receiver = to_responder ? r : i;
        auto reply = receiver.on_message(in_flight);
        if (!reply) {
            (to_responder ? run.responder_error : run.initiator_error) = reply.error();
            break;
        }
        in_flight = *reply;
        to_responder = !to_responder;
    }
    run.initiator_done = i.done();
    run.responder_done = r.done();
    if (i.done()) run.initiator = i.take_outcome();
    if (r.done()) run.responder = r.take_outcome();
    return run;
}

TEST(LinkHandshake, BothSidesAgreeOnKeysAndIdentities) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    HandshakeRun run = run_handshake(a, secret_of(1), b, secret_of(1));
    ASSERT_TRUE(run.initiator_done);
    ASSERT_TRUE(run.responder_done);
    ASSERT_EQ(run.transcript.messages.size(), 4u);
    EXPECT_EQ(run.initiator->peer_id, b.id());
    EXPECT_EQ(run.responder->peer_id, a.id());
    EXPECT_EQ(run.initiator->peer_key, b.public_key());
    EXPECT_EQ(run.initiator->handshake_hash, run.responder->handshake_hash);

    // Keys agree both ways; the confirmation used the responder's nonce 0.
    Bytes ct;
    ASSERT_TRUE(run.initiator->send.encrypt_with_ad({}, bytes_of("to responder"), ct));
    Bytes pt;
    ASSERT_TRUE(run.responder->recv.decrypt_with_ad({}, ct, pt));
    EXPECT_EQ(pt, bytes_of("to responder"));
    ct.clear();
    pt.clear();
    ASSERT_TRUE(run.responder->send.encrypt_with_ad({}, bytes_of("to initiator"), ct));
    ASSERT_TRUE(run.initiator->recv.decrypt_with_ad({}, ct, pt));
    EXPECT_EQ(pt, bytes_of("to initiator"));
    // Direction keys differ: the initiator cannot decrypt its own traffic with its receive key.
    Bytes own;
    ASSERT_TRUE(run.initiator->send.encrypt_with_ad({}, bytes_of("x"), own));
    Bytes ignored;
    EXPECT_FALSE(run.initiator->recv.decrypt_with_ad({}, own, ignored));
}

TEST(LinkHandshake, FreshEphemeralsGiveFreshSessions) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    HandshakeRun r1 = run_handshake(a, secret_of(1), b, secret_of(1));
    HandshakeRun r2 = run_handshake(a, secret_of(1), b, secret_of(1));
    ASSERT_TRUE(r1.initiator_done && r2.initiator_done);
    EXPECT_NE(r1.initiator->handshake_hash, r2.initiator->handshake_hash);
    EXPECT_NE(r1.transcript.messages[0], r2.transcript.messages[0]);
}

TEST(LinkHandshake, WrongSecretFailsOnBothSidesAndRevealsNothing) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    for (bool stranger_is_initiator : {true, false}) {
        HandshakeRun run = stranger_is_initiator ? run_handshake(a, secret_of(9), b, secret_of(1))
                                                 : run_handshake(a, secret_of(1), b, secret_of(9));
        EXPECT_FALSE(run.initiator_done);
        EXPECT_FALSE(run.responder_done);
        // The responder rejects msg3 (psk mixed in): no confirmation is ever produced.
        ASSERT_TRUE(run.responder_error.has_value());
        EXPECT_EQ(run.responder_error->code, errc::handshake_failed);
        EXPECT_EQ(run.transcript.messages.size(), 3u);
        // The initiator's identity never appears in clear: msg3 carries it encrypted.
        const Bytes& msg3 = run.transcript.messages[2];
        EXPECT_EQ(
            std::search(msg3.begin(), msg3.end(), a.public_key().begin(), a.public_key().end()),
            msg3.end());
    }
    // And the initiator, left waiting, rejects anything that claims to be the confirmation.
    LinkHandshake i(LinkHandshake::Role::kInitiator, a, secret_of(1));
    LinkHandshake r(LinkHandshake::Role::kResponder, b, secret_of(2));
    auto m1 = i.start();
    ASSERT_TRUE(r.start());
    auto m2 = r.on_message(*m1);
    ASSERT_TRUE(m2);
    auto m3 = i.on_message(*m2);
    ASSERT_TRUE(m3);
    EXPECT_FALSE(r.on_message(*m3));
    Bytes fake(29, 0x42);
    auto confirm = i.on_message(fake);
    ASSERT_FALSE(confirm);
    EXPECT_EQ(confirm.error().code, errc::handshake_failed);
    EXPECT_FALSE(i.done());
}

TEST(LinkHandshake, AnyAlteredByteOfAnyMessageFails) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    const HandshakeRun clean = run_handshake(a, secret_of(3), b, secret_of(3));
    ASSERT_TRUE(clean.initiator_done);
    std::size_t checked = 0;
    for (std::size_t msg = 0; msg < clean.transcript.messages.size(); ++msg) {
        for (std::size_t pos = 0; pos < clean.transcript.messages[msg].size(); ++pos) {
            HandshakeRun run =
                run_handshake(a, secret_of(3), b, secret_of(3), [&](std::size_t index, Bytes& m) {
                    if (index == msg) m[pos] ^= 0x01;
                });
            ASSERT_FALSE(run.initiator_done && run.responder_done)
                << "flipping byte " << pos << " of message " << msg << " went unnoticed";
            ASSERT_TRUE(run.initiator_error || run.responder_error);
            ++checked;
        }
    }
    EXPECT_GT(checked, 400u);
}

TEST(LinkHandshake, TruncatedOrExtendedMessagesFail) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    for (std::size_t msg = 0; msg < 4; ++msg) {
        HandshakeRun cut =
            run_handshake(a, secret_of(3), b, secret_of(3), [&](std::size_t index, Bytes& m) {
                if (index == msg) m.pop_back();
            });
        EXPECT_FALSE(cut.initiator_done && cut.responder_done) << "message " << msg;
        HandshakeRun longer =
            run_handshake(a, secret_of(3), b, secret_of(3), [&](std::size_t index, Bytes& m) {
                if (index == msg) m.push_back(0);
            });
        EXPECT_FALSE(longer.initiator_done && longer.responder_done) << "message " << msg;
    }
}

TEST(LinkHandshake, IncompatibleMajorVersionIsNamed) {
    const NodeKey a = NodeKey::generate();
    const NodeKey b = NodeKey::generate();
    const MeshSecret psk = secret_of(5);
    // A future initiator speaking protocol 2 (same Noise pattern and prologue).
    noise::HandshakeState future(noise::HandshakeState::Config{
        noise::pattern_xxpsk3(), true, Bytes(kLinkPrologue.begin(), kLinkPrologue.end()),
        noise::KeyPair::from_secret(a.x25519_secret()), std::nullopt, psk});
    Bytes version = {2, 0, 0, 0};
    Bytes msg1;
    ASSERT_TRUE(future.write_message(version, msg1));
    LinkHandshake r(LinkHandshake::Role::kResponder, b, psk);
    ASSERT_TRUE(r.start());
    auto reply = r.on_message(msg1);
    ASSERT_FALSE(reply);
    EXPECT_EQ(reply.error().code, errc::bad_version);
    EXPECT_NE(reply.error().message.find("protocol 2"), std::string::npos);
}

TEST(LinkHandshake, OutOfOrderUseIsAnErrorNotACrash) {
    const NodeKey a = NodeKey::generate();
    LinkHandshake i(LinkHandshake::Role::kInitiator, a, secret_of(1));
    EXPECT_FALSE(i.on_message(bytes_of("too early")));
    LinkHandshake r(LinkHandshake::Role::kResponder, a, secret_of(1));
    ASSERT_TRUE(r.start());
    EXPECT_FALSE(r.on_message({}));
    EXPECT_FALSE(r.on_message(Bytes(70000, 1)));  // failed handshakes stay failed
}

// --- record layer -------------------------------------------------------------------------

struct ChannelPair {
    std::unique_ptr<SecureChannel> a;
    std::unique_ptr<SecureChannel> b;
};

ChannelPair make_channels() {
    const NodeKey ka = NodeKey::generate();
    const NodeKey kb = NodeKey::generate();
    HandshakeRun run = run_handshake(ka, secret_of(7), kb, secret_of(7));
    EXPECT_TRUE(run.initiator_done && run.responder_done);
    return {std::make_unique<SecureChannel>(run.initiator->send, run.initiator->recv),
            std::make_unique<SecureChannel>(run.responder->send, run.responder->recv)};
}

// Seals each message separately and returns the ciphertext of each.
std::vector<Bytes> seal_each(SecureChannel& c, const std::vector<Message>& ms) {
    std::vector<Bytes> out;
    for (const Message& m : ms) {
        Bytes b;
        EXPECT_TRUE(c.seal(m, b));
        out.push_back(std::move(b));
    }
    return out;
}

std::vector<Message> three_messages() {
    return {Heartbeat{1, 10, false}, Cancel{42, "client went away"}, Heartbeat{2, 20, true}};
}

TEST(SecureChannel, CarriesFramesAcrossRecordBoundaries) {
    ChannelPair p = make_channels();
    ActivationFrame big;
    big.batch_id = 9;
    big.hidden = 128;
    big.dtype = ActivationDType::kF32;
    big.entries = {ActivationEntry{1, 0, 300, true, std::vector<std::int32_t>(300, 5), {}}};
    big.payload.resize(300 * 128 * 4);
    for (std::size_t i = 0; i < big.payload.size(); ++i)
        big.payload[i] = static_cast<std::uint8_t>(i * 31);
    Bytes wire;
    ASSERT_TRUE(p.a->seal(big, wire));
    ASSERT_TRUE(p.a->seal(Cancel{1, "x"}, wire));
    EXPECT_GT(p.a->records_sent(), 2u);  // 153 KB needs several 64 KiB records
    // Deliver in awkward pieces.
    for (std::size_t pos = 0; pos < wire.size(); pos += 1000) {
        ASSERT_TRUE(
            p.b->feed(ByteSpan(wire).subspan(pos, std::min<std::size_t>(1000, wire.size() - pos))));
    }
    auto m1 = p.b->next();
    ASSERT_TRUE(m1 && *m1);
    EXPECT_EQ(std::get<ActivationFrame>(**m1), big);
    auto m2 = p.b->next();
    ASSERT_TRUE(m2 && *m2);
    EXPECT_EQ(std::get<Cancel>(**m2).request_id, 1u);
    EXPECT_EQ(p.b->pending_bytes(), 0u);
}

TEST(SecureChannel, TamperedRecordFails) {
    ChannelPair p = make_channels();
    auto records = seal_each(*p.a, three_messages());
    for (std::size_t pos = 0; pos < records[0].size(); ++pos) {
        ChannelPair q = make_channels();
        auto rs = seal_each(*q.a, three_messages());
        rs[0][pos] ^= 0x80;
        auto fed = q.b->feed(rs[0]);
        // Either the record fails now, or (length byte changed) it is incomplete and never
        // completes correctly: feeding the rest must fail.
        if (fed) fed = q.b->feed(rs[1]);
        if (fed) fed = q.b->feed(rs[2]);
        if (fed) {
            auto next = q.b->next();
            EXPECT_FALSE(next && *next && std::holds_alternative<Heartbeat>(**next) &&
                         std::get<Heartbeat>(**next).seq == 1)
                << "byte " << pos;
        } else {
            EXPECT_EQ(fed.error().code, errc::decrypt_failed) << "byte " << pos;
        }
    }
}

TEST(SecureChannel, ReplayedRecordFails) {
    ChannelPair p = make_channels();
    auto rs = seal_each(*p.a, three_messages());
    ASSERT_TRUE(p.b->feed(rs[0]));
    auto again = p.b->feed(rs[0]);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, errc::decrypt_failed);
    EXPECT_FALSE(p.b->feed(rs[1]));  // failure is final
}

TEST(SecureChannel, ReorderedRecordsFail) {
    ChannelPair p = make_channels();
    auto rs = seal_each(*p.a, three_messages());
    auto r = p.b->feed(rs[1]);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::decrypt_failed);
}

TEST(SecureChannel, DroppedRecordFails) {
    ChannelPair p = make_channels();
    auto rs = seal_each(*p.a, three_messages());
    ASSERT_TRUE(p.b->feed(rs[0]));
    EXPECT_FALSE(p.b->feed(rs[2]));
}

TEST(SecureChannel, TruncationLeavesPendingBytes) {
    ChannelPair p = make_channels();
    auto rs = seal_each(*p.a, three_messages());
    for (std::size_t cut = 1; cut < rs[0].size(); ++cut) {
        ChannelPair q = make_channels();
        auto qs = seal_each(*q.a, three_messages());
        ASSERT_TRUE(q.b->feed(ByteSpan(qs[0]).first(cut)));
        auto next = q.b->next();
        ASSERT_TRUE(next);
        EXPECT_FALSE(next->has_value());
        EXPECT_GT(q.b->pending_bytes(), 0u);  // at EOF this is reported as truncation
    }
}

TEST(SecureChannel, CrossSessionRecordsFail) {
    ChannelPair p = make_channels();
    ChannelPair q = make_channels();
    auto rs = seal_each(*p.a, three_messages());
    EXPECT_FALSE(q.b->feed(rs[0]));
}

}  // namespace
}  // namespace brigade::mesh
