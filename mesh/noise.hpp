#pragma once
// Noise Protocol Framework building blocks (revision 34, §4-5), for the suite
// 25519_ChaChaPoly_BLAKE2b over libsodium:
//   DH: X25519 (crypto_scalarmult), DHLEN 32
//   cipher: ChaCha20-Poly1305 IETF, nonce = 4 zero bytes || 64-bit little-endian counter
//   hash: BLAKE2b, HASHLEN 64, BLOCKLEN 128; HMAC per RFC 2104; HKDF as Noise §4.3 defines it.
// Pure functions and value types; no I/O.

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "mesh/bytes.hpp"
#include "mesh/errors.hpp"

namespace brigade::mesh::noise {

inline constexpr std::size_t kHashLen = 64;
inline constexpr std::size_t kBlockLen = 128;
inline constexpr std::size_t kKeyLen = 32;
inline constexpr std::size_t kDhLen = 32;
inline constexpr std::size_t kTagLen = 16;
inline constexpr std::size_t kMaxMessageLen = 65535;  // Noise §3

using Hash = std::array<std::uint8_t, kHashLen>;
using Key = std::array<std::uint8_t, kKeyLen>;

Hash blake2b(ByteSpan data);
Hash hmac_blake2b(ByteSpan key, ByteSpan data);
// HKDF(chaining_key, input_key_material, n) for n = 2 or 3 (Noise §4.3).
void hkdf(const Hash& chaining_key, ByteSpan ikm, Hash* out1, Hash* out2, Hash* out3);

struct KeyPair {
    std::array<std::uint8_t, kDhLen> secret{};
    std::array<std::uint8_t, kDhLen> public_key{};

    static KeyPair generate();
    static KeyPair from_secret(const std::array<std::uint8_t, kDhLen>& secret);
};

// X25519; fails on a low-order peer key (all-zero shared secret).
Result<std::array<std::uint8_t, kDhLen>> dh(const KeyPair& own, ByteSpan peer_public);

// Noise CipherState: a key and a 64-bit nonce that increments after every message, so a replayed,
// dropped or reordered message fails authentication.
class CipherState {
public:
    void initialize_key(std::optional<Key> k) {
        key_ = k;
        nonce_ = 0;
    }
    bool has_key() const { return key_.has_value(); }
    std::uint64_t nonce() const { return nonce_; }
    void set_nonce(std::uint64_t n) { nonce_ = n; }

    // Appends ciphertext (plaintext + 16-byte tag) to `out`; plaintext when there is no key.
    Result<void> encrypt_with_ad(ByteSpan ad, ByteSpan plaintext, Bytes& out);
    // Appends plaintext to `out`. On failure the nonce does not advance.
    Result<void> decrypt_with_ad(ByteSpan ad, ByteSpan ciphertext, Bytes& out);

    ~CipherState();

private:
    std::optional<Key> key_;
    std::uint64_t nonce_ = 0;
};

class SymmetricState {
public:
    explicit SymmetricState(std::string_view protocol_name);

    void mix_key(ByteSpan ikm);
    void mix_hash(ByteSpan data);
    void mix_key_and_hash(ByteSpan ikm);
    const Hash& handshake_hash() const { return h_; }
    bool has_key() const { return cipher_.has_key(); }
    Result<void> encrypt_and_hash(ByteSpan plaintext, Bytes& out);
    Result<void> decrypt_and_hash(ByteSpan ciphertext, Bytes& out);
    // Split(): (initiator -> responder, responder -> initiator) cipher states.
    std::pair<CipherState, CipherState> split() const;

    ~SymmetricState();

private:
    CipherState cipher_;
    Hash ck_{};
    Hash h_{};
};

}  // namespace brigade::mesh::noise
