#include "mesh/noise.hpp"

#include <sodium.h>

#include <cstring>

#include "mesh/sodium_init.hpp"

namespace brigade::mesh::noise {

Hash blake2b(ByteSpan data) {
    Hash h{};
    crypto_generichash(h.data(), h.size(), data.data(), data.size(), nullptr, 0);
    return h;
}

Hash hmac_blake2b(ByteSpan key, ByteSpan data) {
    // RFC 2104 with B = 128: keys longer than a block are hashed first, then zero-padded.
    std::array<std::uint8_t, kBlockLen> k{};
    if (key.size() > kBlockLen) {
        const Hash hk = blake2b(key);
        std::memcpy(k.data(), hk.data(), hk.size());
    } else if (!key.empty()) {
        std::memcpy(k.data(), key.data(), key.size());
    }
    std::array<std::uint8_t, kBlockLen> pad{};
    Hash inner{};
    crypto_generichash_state st;
    for (std::size_t i = 0; i < kBlockLen; ++i) pad[i] = k[i] ^ 0x36;
    crypto_generichash_init(&st, nullptr, 0, kHashLen);
    crypto_generichash_update(&st, pad.data(), pad.size());
    crypto_generichash_update(&st, data.data(), data.size());
    crypto_generichash_final(&st, inner.data(), inner.size());
    for (std::size_t i = 0; i < kBlockLen; ++i) pad[i] = k[i] ^ 0x5c;
    Hash outer{};
    crypto_generichash_init(&st, nullptr, 0, kHashLen);
    crypto_generichash_update(&st, pad.data(), pad.size());
    crypto_generichash_update(&st, inner.data(), inner.size());
    crypto_generichash_final(&st, outer.data(), outer.size());
    sodium_memzero(k.data(), k.size());
    sodium_memzero(pad.data(), pad.size());
    sodium_memzero(inner.data(), inner.size());
    return outer;
}

void hkdf(const Hash& chaining_key, ByteSpan ikm, Hash* out1, Hash* out2, Hash* out3) {
    Hash temp_key = hmac_blake2b(chaining_key, ikm);
    const std::uint8_t one = 0x01;
    *out1 = hmac_blake2b(temp_key, ByteSpan(&one, 1));
    std::array<std::uint8_t, kHashLen + 1> buf{};
    std::memcpy(buf.data(), out1->data(), kHashLen);
    buf[kHashLen] = 0x02;
    *out2 = hmac_blake2b(temp_key, buf);
    if (out3 != nullptr) {
        std::memcpy(buf.data(), out2->data(), kHashLen);
        buf[kHashLen] = 0x03;
        *out3 = hmac_blake2b(temp_key, buf);
    }
    sodium_memzero(temp_key.data(), temp_key.size());
    sodium_memzero(buf.data(), buf.size());
}

KeyPair KeyPair::generate() {
    ensure_sodium_initialized();
    std::array<std::uint8_t, kDhLen> secret{};
    randombytes_buf(secret.data(), secret.size());
    KeyPair kp = from_secret(secret);
    sodium_memzero(secret.data(), secret.size());
    return kp;
}

KeyPair KeyPair::from_secret(const std::array<std::uint8_t, kDhLen>& secret) {
    KeyPair kp;
    kp.secret = secret;
    crypto_scalarmult_base(kp.public_key.data(), kp.secret.data());
    return kp;
}

Result<std::array<std::uint8_t, kDhLen>> dh(const KeyPair& own, ByteSpan peer_public) {
    std::array<std::uint8_t, kDhLen> out{};
    if (peer_public.size() != kDhLen ||
        crypto_scalarmult(out.data(), own.secret.data(), peer_public.data()) != 0) {
        return make_error(errc::handshake_failed, "peer sent a low-order or malformed X25519 key");
    }
    return out;
}

namespace {

void make_nonce(std::uint64_t n, unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES]) {
    std::memset(nonce, 0, crypto_aead_chacha20poly1305_IETF_NPUBBYTES);
    for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(n >> (8 * i));
}

}  // namespace

CipherState::~CipherState() {
    if (key_) sodium_memzero(key_->data(), key_->size());
}

Result<void> CipherState::encrypt_with_ad(ByteSpan ad, ByteSpan plaintext, Bytes& out) {
    if (!key_) {
        out.insert(out.end(), plaintext.begin(), plaintext.end());
        return {};
    }
    if (nonce_ == UINT64_MAX) {  // 2^64-1 is reserved (Noise §5.1)
        return make_error(errc::decrypt_failed,
                          "nonce space exhausted; the link must be re-established");
    }
    unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
    make_nonce(nonce_, nonce);
    const std::size_t at = out.size();
    out.resize(at + plaintext.size() + kTagLen);
    unsigned long long clen = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt(out.data() + at, &clen, plaintext.data(),
                                              plaintext.size(), ad.data(), ad.size(), nullptr,
                                              nonce, key_->data());
    ++nonce_;
    return {};
}

Result<void> CipherState::decrypt_with_ad(ByteSpan ad, ByteSpan ciphertext, Bytes& out) {
    if (!key_) {
        out.insert(out.end(), ciphertext.begin(), ciphertext.end());
        return {};
    }
    if (ciphertext.size() < kTagLen) {
        return make_error(errc::decrypt_failed, "ciphertext shorter than its tag");
    }
    if (nonce_ == UINT64_MAX) {
        return make_error(errc::decrypt_failed, "nonce space exhausted");
    }
    unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
    make_nonce(nonce_, nonce);
    const std::size_t at = out.size();
    out.resize(at + ciphertext.size() - kTagLen);
    unsigned long long plen = 0;
    if (crypto_aead_chacha20poly1305_ietf_decrypt(out.data() + at, &plen, nullptr,
                                                  ciphertext.data(), ciphertext.size(), ad.data(),
                                                  ad.size(), nonce, key_->data()) != 0) {
        out.resize(at);
        return make_error(errc::decrypt_failed,
                          "authentication failed (tampered, replayed, reordered or wrong key)");
    }
    ++nonce_;
    return {};
}

SymmetricState::SymmetricState(std::string_view protocol_name) {
    ensure_sodium_initialized();
    if (protocol_name.size() <= kHashLen) {
        std::memcpy(h_.data(), protocol_name.data(), protocol_name.size());
    } else {
        h_ = blake2b(
            {reinterpret_cast<const std::uint8_t*>(protocol_name.data()), protocol_name.size()});
    }
    ck_ = h_;
}

SymmetricState::~SymmetricState() { sodium_memzero(ck_.data(), ck_.size()); }

void SymmetricState::mix_key(ByteSpan ikm) {
    Hash temp_k{};
    hkdf(ck_, ikm, &ck_, &temp_k, nullptr);
    Key k{};
    std::memcpy(k.data(), temp_k.data(), kKeyLen);  // HASHLEN 64: truncate to 32
    cipher_.initialize_key(k);
    sodium_memzero(temp_k.data(), temp_k.size());
    sodium_memzero(k.data(), k.size());
}

void SymmetricState::mix_hash(ByteSpan data) {
    crypto_generichash_state st;
    crypto_generichash_init(&st, nullptr, 0, kHashLen);
    crypto_generichash_update(&st, h_.data(), h_.size());
    crypto_generichash_update(&st, data.data(), data.size());
    crypto_generichash_final(&st, h_.data(), h_.size());
}

void SymmetricState::mix_key_and_hash(ByteSpan ikm) {
    Hash temp_h{};
    Hash temp_k{};
    hkdf(ck_, ikm, &ck_, &temp_h, &temp_k);
    mix_hash(temp_h);
    Key k{};
    std::memcpy(k.data(), temp_k.data(), kKeyLen);
    cipher_.initialize_key(k);
    sodium_memzero(temp_k.data(), temp_k.size());
    sodium_memzero(k.data(), k.size());
}

Result<void> SymmetricState::encrypt_and_hash(ByteSpan plaintext, Bytes& out) {
    const std::size_t at = out.size();
    if (auto r = cipher_.encrypt_with_ad(h_, plaintext, out); !r) return r;
    mix_hash(ByteSpan(out.data() + at, out.size() - at));
    return {};
}

Result<void> SymmetricState::decrypt_and_hash(ByteSpan ciphertext, Bytes& out) {
    if (auto r = cipher_.decrypt_with_ad(h_, ciphertext, out); !r) return r;
    mix_hash(ciphertext);
    return {};
}

std::pair<CipherState, CipherState> SymmetricState::split() const {
    Hash k1{};
    Hash k2{};
    hkdf(ck_, ByteSpan{}, &k1, &k2, nullptr);
    Key a{};
    Key b{};
    std::memcpy(a.data(), k1.data(), kKeyLen);
    std::memcpy(b.data(), k2.data(), kKeyLen);
    std::pair<CipherState, CipherState> out;
    out.first.initialize_key(a);
    out.second.initialize_key(b);
    sodium_memzero(k1.data(), k1.size());
    sodium_memzero(k2.data(), k2.size());
    sodium_memzero(a.data(), a.size());
    sodium_memzero(b.data(), b.size());
    return out;
}

}  // namespace brigade::mesh::noise
