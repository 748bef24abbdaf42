#include "mesh/handshake.hpp"

#include <sodium.h>

#include <cstring>

#include "mesh/bytes.hpp"
#include "mesh/messages.hpp"

namespace brigade::mesh {
namespace noise {

Pattern pattern_xxpsk3() {
    return Pattern{"Noise_XXpsk3_25519_ChaChaPoly_BLAKE2b",
                   {{Token::kE},
                    {Token::kE, Token::kEE, Token::kS, Token::kES},
                    {Token::kS, Token::kSE, Token::kPsk}},
                   true};
}

Pattern pattern_nnpsk0() {
    return Pattern{"Noise_NNpsk0_25519_ChaChaPoly_BLAKE2b",
                   {{Token::kPsk, Token::kE}, {Token::kE, Token::kEE}},
                   true};
}

HandshakeState::HandshakeState(Config config)
    : config_(std::move(config)), symmetric_(config_.pattern.protocol_name) {
    symmetric_.mix_hash(config_.prologue);
    // XX and NN have no pre-messages.
}

bool HandshakeState::my_turn() const {
    const bool initiator_turn = index_ % 2 == 0;
    return !finished() && initiator_turn == config_.initiator;
}

Result<void> HandshakeState::mix_dh(const KeyPair& own,
                                    const std::optional<std::array<std::uint8_t, kDhLen>>& peer) {
    if (!peer) return make_error(errc::handshake_failed, "DH before the peer key is known");
    auto shared = dh(own, *peer);
    if (!shared) return shared.error();
    symmetric_.mix_key(*shared);
    sodium_memzero(shared->data(), shared->size());
    return {};
}

Result<void> HandshakeState::write_tokens(Bytes& out) {
    if (!my_turn() || tokens_done_) {
        return make_error(errc::handshake_failed, "handshake message written out of turn");
    }
    const bool initiator = config_.initiator;
    for (Token t : config_.pattern.messages[index_]) {
        switch (t) {
            case Token::kE: {
                if (!config_.ephemeral) config_.ephemeral = KeyPair::generate();
                const auto& pub = config_.ephemeral->public_key;
                out.insert(out.end(), pub.begin(), pub.end());
                symmetric_.mix_hash(pub);
                if (config_.pattern.has_psk) symmetric_.mix_key(pub);
                break;
            }
            case Token::kS: {
                if (!config_.static_key) return make_error(errc::handshake_failed, "no static key");
                if (auto r = symmetric_.encrypt_and_hash(config_.static_key->public_key, out); !r) {
                    return r;
                }
                break;
            }
            case Token::kEE:
                if (auto r = mix_dh(*config_.ephemeral, re_); !r) return r;
                break;
            case Token::kES:
                if (auto r = initiator ? mix_dh(*config_.ephemeral, rs_)
                                       : mix_dh(*config_.static_key, re_);
                    !r) {
                    return r;
                }
                break;
            case Token::kSE:
                if (auto r = initiator ? mix_dh(*config_.static_key, re_)
                                       : mix_dh(*config_.ephemeral, rs_);
                    !r) {
                    return r;
                }
                break;
            case Token::kSS:
                if (auto r = mix_dh(*config_.static_key, rs_); !r) return r;
                break;
            case Token::kPsk:
                if (!config_.psk) return make_error(errc::handshake_failed, "no psk");
                symmetric_.mix_key_and_hash(*config_.psk);
                break;
        }
    }
    tokens_done_ = true;
    return {};
}

Result<void> HandshakeState::write_payload(ByteSpan payload, Bytes& out) {
    if (!tokens_done_) return make_error(errc::handshake_failed, "payload before tokens");
    if (auto r = symmetric_.encrypt_and_hash(payload, out); !r) return r;
    tokens_done_ = false;
    ++index_;
    if (out.size() > kMaxMessageLen) {
        return make_error(errc::handshake_failed, "handshake message over 65535 bytes");
    }
    return {};
}

Result<void> HandshakeState::write_message(ByteSpan payload, Bytes& out) {
    if (auto r = write_tokens(out); !r) return r;
    return write_payload(payload, out);
}

Result<ByteSpan> HandshakeState::read_tokens(ByteSpan message) {
    if (finished() || my_turn() || tokens_done_) {
        return make_error(errc::handshake_failed, "handshake message received out of turn");
    }
    if (message.size() > kMaxMessageLen) {
        return make_error(errc::handshake_failed, "handshake message over 65535 bytes");
    }
    const bool initiator = config_.initiator;
    std::size_t pos = 0;
    for (Token t : config_.pattern.messages[index_]) {
        switch (t) {
            case Token::kE: {
                if (message.size() - pos < kDhLen) {
                    return make_error(errc::handshake_failed, "handshake message truncated (e)");
                }
                std::array<std::uint8_t, kDhLen> e{};
                std::memcpy(e.data(), message.data() + pos, kDhLen);
                pos += kDhLen;
                re_ = e;
                symmetric_.mix_hash(e);
                if (config_.pattern.has_psk) symmetric_.mix_key(e);
                break;
            }
            case Token::kS: {
                const std::size_t n = kDhLen + (symmetric_.has_key() ? kTagLen : 0);
                if (message.size() - pos < n) {
                    return make_error(errc::handshake_failed, "handshake message truncated (s)");
                }
                Bytes s;
                if (auto r = symmetric_.decrypt_and_hash(message.subspan(pos, n), s); !r) {
                    return make_error(errc::handshake_failed, "peer static key failed to decrypt");
                }
                pos += n;
                std::array<std::uint8_t, kDhLen> rs{};
                std::memcpy(rs.data(), s.data(), kDhLen);
                rs_ = rs;
                break;
            }
            case Token::kEE:
                if (auto r = mix_dh(*config_.ephemeral, re_); !r) return r.error();
                break;
            case Token::kES:
                if (auto r = initiator ? mix_dh(*config_.ephemeral, rs_)
                                       : mix_dh(*config_.static_key, re_);
                    !r) {
                    return r.error();
                }
                break;
            case Token::kSE:
                if (auto r = initiator ? mix_dh(*config_.static_key, re_)
                                       : mix_dh(*config_.ephemeral, rs_);
                    !r) {
                    return r.error();
                }
                break;
            case Token::kSS:
                if (auto r = mix_dh(*config_.static_key, rs_); !r) return r.error();
                break;
            case Token::kPsk:
                if (!config_.psk) return make_error(errc::handshake_failed, "no psk");
                symmetric_.mix_key_and_hash(*config_.psk);
                break;
        }
    }
    tokens_done_ = true;
    return message.subspan(pos);
}

Result<void> HandshakeState::read_payload(ByteSpan rest, Bytes& payload_out) {
    if (!tokens_done_) return make_error(errc::handshake_failed, "payload before tokens");
    if (auto r = symmetric_.decrypt_and_hash(rest, payload_out); !r) {
        return make_error(errc::handshake_failed, "handshake payload failed to decrypt");
    }
    tokens_done_ = false;
    ++index_;
    return {};
}

Result<void> HandshakeState::read_message(ByteSpan message, Bytes& payload_out) {
    auto rest = read_tokens(message);
    if (!rest) return rest.error();
    return read_payload(*rest, payload_out);
}

std::pair<CipherState, CipherState> HandshakeState::split() const {
    auto [c1, c2] = symmetric_.split();
    if (config_.initiator) return {c1, c2};
    return {c2, c1};
}

}  // namespace noise

namespace {

constexpr std::string_view kIdentityContext = "brigade link identity v1";
constexpr std::string_view kReadyPayload = "brigade-ready";
constexpr std::uint8_t kIdentityVersion = 1;
constexpr std::size_t kIdentityBytes = 1 + 32 + 64;
constexpr std::uint8_t kRoleInitiator = 'I';
constexpr std::uint8_t kRoleResponder = 'R';

Bytes identity_message(std::uint8_t role_byte, const noise::Hash& h) {
    Bytes m(kIdentityContext.begin(), kIdentityContext.end());
    m.push_back(role_byte);
    m.insert(m.end(), h.begin(), h.end());
    return m;
}

}  // namespace

LinkHandshake::LinkHandshake(Role role, const NodeKey& identity, const MeshSecret& psk)
    : role_(role),
      identity_(identity),
      state_(noise::HandshakeState::Config{
          noise::pattern_xxpsk3(),
          role == Role::kInitiator,
          Bytes(kLinkPrologue.begin(), kLinkPrologue.end()),
          noise::KeyPair::from_secret(identity.x25519_secret()),
          std::nullopt,
          psk,
      }) {}

void LinkHandshake::set_ephemeral_for_test(const noise::KeyPair& e) {
    // Rebuild the state with a preset ephemeral; only valid before start().
    state_ = noise::HandshakeState(noise::HandshakeState::Config{
        noise::pattern_xxpsk3(), role_ == Role::kInitiator,
        Bytes(kLinkPrologue.begin(), kLinkPrologue.end()),
        noise::KeyPair::from_secret(identity_.x25519_secret()), e, std::nullopt});
}

Bytes LinkHandshake::identity_payload(std::uint8_t role_byte) {
    const Bytes signed_bytes = identity_message(role_byte, state_.handshake_hash());
    const auto sig = identity_.sign_bytes(signed_bytes.data(), signed_bytes.size());
    Bytes p;
    ByteWriter w(p);
    w.u8(kIdentityVersion);
    w.array(identity_.public_key());
    w.array(sig);
    return p;
}

Result<void> LinkHandshake::check_identity(ByteSpan payload, std::uint8_t role_byte,
                                           const noise::Hash& h) {
    if (payload.size() < kIdentityBytes || payload[0] != kIdentityVersion) {
        return make_error(errc::handshake_failed, "peer identity payload is malformed");
    }
    Ed25519PublicKey pk{};
    std::array<std::uint8_t, 64> sig{};
    std::memcpy(pk.data(), payload.data() + 1, 32);
    std::memcpy(sig.data(), payload.data() + 33, 64);
    auto x = ed25519_to_x25519_public(pk);
    if (!x || !state_.remote_static() || *x != *state_.remote_static()) {
        return make_error(errc::handshake_failed,
                          "peer's Ed25519 key does not match its Noise static key");
    }
    const Bytes signed_bytes = identity_message(role_byte, h);
    if (!verify_signature(pk, signed_bytes.data(), signed_bytes.size(), sig)) {
        return make_error(errc::handshake_failed, "peer's identity signature is invalid");
    }
    outcome_.peer_key = pk;
    outcome_.peer_id = node_id_from_public_key(pk);
    return {};
}

Result<Bytes> LinkHandshake::start() {
    if (started_ || failed_) return make_error(errc::handshake_failed, "handshake already started");
    started_ = true;
    if (role_ == Role::kResponder) return Bytes{};
    Bytes out;
    Bytes version;
    ByteWriter w(version);
    w.u16(kProtocolMajor);
    w.u16(kProtocolMinor);
    if (auto r = state_.write_message(version, out); !r) {
        failed_ = true;
        return r.error();
    }
    return out;
}

Result<Bytes> LinkHandshake::on_message(ByteSpan message) {
    if (!started_ || failed_ || done_) {
        return make_error(errc::handshake_failed, "handshake message in the wrong state");
    }
    ++received_;
    auto fail = [&](Error e) -> Result<Bytes> {
        failed_ = true;
        return e;
    };
    const std::size_t index = state_.message_index();
    if (role_ == Role::kResponder && index == 0) {
        // msg1: e, payload = version.
        Bytes payload;
        if (auto r = state_.read_message(message, payload); !r) return fail(r.error());
        ByteReader rd(payload);
        outcome_.peer_major = rd.u16();
        outcome_.peer_minor = rd.u16();
        if (!rd.ok()) return fail(make_error(errc::handshake_failed, "msg1 lacks a version"));
        if (outcome_.peer_major != kProtocolMajor) {
            return fail(make_error(errc::bad_version, "peer speaks mesh protocol " +
                                                          std::to_string(outcome_.peer_major) +
                                                          ".x, this node speaks " +
                                                          std::to_string(kProtocolMajor) + ".x"));
        }
        // msg2: e, ee, s, es, payload = identity signed over the hash after the tokens.
        Bytes out;
        if (auto r = state_.write_tokens(out); !r) return fail(r.error());
        if (auto r = state_.write_payload(identity_payload(kRoleResponder), out); !r) {
            return fail(r.error());
        }
        return out;
    }
    if (role_ == Role::kInitiator && index == 1) {
        // msg2 from the responder.
        auto rest = state_.read_tokens(message);
        if (!rest) return fail(rest.error());
        const noise::Hash h = state_.handshake_hash();
        Bytes payload;
        if (auto r = state_.read_payload(*rest, payload); !r) return fail(r.error());
        if (auto r = check_identity(payload, kRoleResponder, h); !r) return fail(r.error());
        // msg3: s, se, psk, payload = identity.
        Bytes out;
        if (auto r = state_.write_tokens(out); !r) return fail(r.error());
        if (auto r = state_.write_payload(identity_payload(kRoleInitiator), out); !r) {
            return fail(r.error());
        }
        auto [send, recv] = state_.split();
        outcome_.send = send;
        outcome_.recv = recv;
        outcome_.handshake_hash = state_.handshake_hash();
        outcome_.peer_major = kProtocolMajor;
        return out;  // not done: waits for the responder's ready message
    }
    if (role_ == Role::kResponder && index == 2) {
        auto rest = state_.read_tokens(message);
        if (!rest) return fail(rest.error());
        const noise::Hash h = state_.handshake_hash();
        Bytes payload;
        if (auto r = state_.read_payload(*rest, payload); !r) return fail(r.error());
        if (auto r = check_identity(payload, kRoleInitiator, h); !r) return fail(r.error());
        auto [send, recv] = state_.split();
        outcome_.send = send;
        outcome_.recv = recv;
        outcome_.handshake_hash = state_.handshake_hash();
        Bytes out;
        const Bytes ready(kReadyPayload.begin(), kReadyPayload.end());
        if (auto r = outcome_.send.encrypt_with_ad({}, ready, out); !r) return fail(r.error());
        done_ = true;
        return out;
    }
    if (role_ == Role::kInitiator && state_.finished() && outcome_.recv.has_key()) {
        Bytes plain;
        if (auto r = outcome_.recv.decrypt_with_ad({}, message, plain); !r) {
            return fail(
                make_error(errc::handshake_failed,
                           "responder's confirmation failed to decrypt (wrong mesh secret?)"));
        }
        if (plain != Bytes(kReadyPayload.begin(), kReadyPayload.end())) {
            return fail(make_error(errc::handshake_failed, "responder's confirmation is wrong"));
        }
        done_ = true;
        return Bytes{};
    }
    return fail(make_error(errc::handshake_failed, "unexpected handshake message"));
}

HandshakeOutcome LinkHandshake::take_outcome() { return std::move(outcome_); }

}  // namespace brigade::mesh
