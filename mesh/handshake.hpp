#pragma once
// Link handshake, sans-io: bytes in, bytes out, no sockets.
//
// `noise::HandshakeState` runs a Noise handshake pattern (tokens e, s, ee, es, se, ss, psk), as in
// the Noise spec rev 34 §5.3 and §9. It is checked against the cacophony test vectors.
//
// `LinkHandshake` is the Brigade link handshake built on it (PROTOCOL.md §2):
//   Noise_XXpsk3_25519_ChaChaPoly_BLAKE2b, prologue "brigade-mesh/1", psk = the mesh secret,
//   static keys = the X25519 form of each node's Ed25519 key.
//   msg1 I->R  e                       payload: u16 major, u16 minor
//   msg2 R->I  e, ee, s, es            payload: identity (Ed25519 public key + signature)
//   msg3 I->R  s, se, psk              payload: identity
//   msg4 R->I  transport message 0     payload: "brigade-ready" (proves R knew the psk)
// An identity payload signs the handshake hash, which binds it to this session and to the X25519
// static key used in the DH operations; the receiver also checks that the static key equals the
// X25519 form of the Ed25519 key, then derives the peer's NodeId from that key.

#include <optional>
#include <vector>

#include "mesh/identity.hpp"
#include "mesh/noise.hpp"

namespace brigade::mesh {
namespace noise {

enum class Token : std::uint8_t { kE, kS, kEE, kES, kSE, kSS, kPsk };

struct Pattern {
    std::string protocol_name;
    std::vector<std::vector<Token>> messages;  // alternating, initiator first
    bool has_psk = false;
};

Pattern pattern_xxpsk3();  // Noise_XXpsk3_25519_ChaChaPoly_BLAKE2b
Pattern pattern_nnpsk0();  // Noise_NNpsk0_25519_ChaChaPoly_BLAKE2b (test vectors only)

class HandshakeState {
public:
    struct Config {
        Pattern pattern;
        bool initiator = true;
        Bytes prologue;
        std::optional<KeyPair> static_key;
        std::optional<KeyPair> ephemeral;  // preset only by tests (known-answer vectors)
        std::optional<Key> psk;
    };

    explicit HandshakeState(Config config);

    bool my_turn() const;
    bool finished() const { return index_ >= config_.pattern.messages.size(); }
    std::size_t message_index() const { return index_; }

    // write_tokens then write_payload form one message; split so a caller can sign the handshake
    // hash after the tokens and put the signature in the payload.
    Result<void> write_tokens(Bytes& out);
    Result<void> write_payload(ByteSpan payload, Bytes& out);
    Result<void> write_message(ByteSpan payload, Bytes& out);
    // Consumes the tokens of an incoming message; returns the rest (the encrypted payload).
    Result<ByteSpan> read_tokens(ByteSpan message);
    Result<void> read_payload(ByteSpan rest, Bytes& payload_out);
    Result<void> read_message(ByteSpan message, Bytes& payload_out);

    const Hash& handshake_hash() const { return symmetric_.handshake_hash(); }
    const std::optional<std::array<std::uint8_t, kDhLen>>& remote_static() const { return rs_; }
    // After the last message: (send, receive) cipher states for this side.
    std::pair<CipherState, CipherState> split() const;

private:
    Result<void> mix_dh(const KeyPair& own,
                        const std::optional<std::array<std::uint8_t, kDhLen>>& peer);

    Config config_;
    SymmetricState symmetric_;
    std::optional<std::array<std::uint8_t, kDhLen>> re_;
    std::optional<std::array<std::uint8_t, kDhLen>> rs_;
    std::size_t index_ = 0;
    bool tokens_done_ = false;
};

}  // namespace noise

inline constexpr std::string_view kLinkPrologue = "brigade-mesh/1";

struct HandshakeOutcome {
    noise::CipherState send;
    noise::CipherState recv;
    noise::Hash handshake_hash{};
    NodeId peer_id;
    Ed25519PublicKey peer_key{};
    std::uint16_t peer_major = 0;
    std::uint16_t peer_minor = 0;  // known on the responder side from msg1
};

class LinkHandshake {
public:
    enum class Role { kInitiator, kResponder };

    // `identity` must outlive the handshake.
    LinkHandshake(Role role, const NodeKey& identity, const MeshSecret& psk);

    // Initiator: returns msg1. Responder: returns nothing (it waits for msg1).
    Result<Bytes> start();
    // Feeds one whole handshake message; returns the reply to send (possibly empty). Any error
    // is final: the caller closes the connection without sending anything else.
    Result<Bytes> on_message(ByteSpan message);
    bool done() const { return done_; }
    // Valid once done(); moves the session keys out.
    HandshakeOutcome take_outcome();
    // How many messages this side still expects to receive (for timeouts and logs).
    std::size_t messages_received() const { return received_; }

    // Tests only: fixed ephemeral key.
    void set_ephemeral_for_test(const noise::KeyPair& e);

private:
    Bytes identity_payload(std::uint8_t role_byte);
    Result<void> check_identity(ByteSpan payload, std::uint8_t role_byte, const noise::Hash& h);

    Role role_;
    const NodeKey& identity_;
    noise::HandshakeState state_;
    HandshakeOutcome outcome_;
    bool started_ = false;
    bool done_ = false;
    bool failed_ = false;
    std::size_t received_ = 0;
};

}  // namespace brigade::mesh
