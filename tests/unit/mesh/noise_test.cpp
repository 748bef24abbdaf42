// Noise building blocks and the generic handshake engine, against independent references:
// HMAC/HKDF values computed with Python's hmac + hashlib.blake2b (block size 128), and the
// cacophony test vectors (github.com/haskell-cryptography/cacophony, vectors/cacophony.txt, as
// shipped in mcginty/snow tests/vectors) for Noise_XXpsk3 and Noise_NNpsk0 with 25519,
// ChaChaPoly and BLAKE2b.

#include <gtest/gtest.h>

#include <cstring>

#include "mesh/handshake.hpp"
#include "tests/unit/mesh/test_hex.hpp"

namespace brigade::mesh {
namespace {

using test::bytes_of;
using test::from_hex;
using test::hex;

TEST(HmacBlake2b, MatchesPythonHmac) {
    EXPECT_EQ(
        hex(noise::hmac_blake2b(bytes_of("key"),
                                bytes_of("The quick brown fox jumps over the lazy dog"))),
        "92294f92c0dfb9b00ec9ae8bd94d7e7d8a036b885a499f149dfe2fd2199394aaaf6b8894a1730cccb2cd05"
        "0f9bcf5062a38b51b0dab33207f8ef35ae2c9df51b");
    std::vector<std::uint8_t> key64(64);
    for (int i = 0; i < 64; ++i) key64[i] = static_cast<std::uint8_t>(i);
    EXPECT_EQ(
        hex(noise::hmac_blake2b(key64, {})),
        "ea1896ab7c8319a824482f757c038b70089765501b1f8bdb78153d195915bd330bde7a8c0fb6dbf3de0927"
        "7662ba661fde80017dc277309eedfe05bdf5b27e18");
    // A key longer than the 128-byte block is hashed first (RFC 2104).
    const std::vector<std::uint8_t> long_key(131, 0xaa);
    EXPECT_EQ(
        hex(noise::hmac_blake2b(
            long_key, bytes_of("Test Using Larger Than Block-Size Key - Hash Key First"))),
        "a54b2943b2a20227d41ca46c0945af09bc1faefb2f49894c23aebc557fb79c4889dca74408dc865086667a"
        "edee4a3185c53a49c80b814c4c5813ea0c8b38a8f8");
}

TEST(Hkdf, MatchesNoiseDefinitionComputedInPython) {
    noise::Hash ck{};
    for (int i = 0; i < 64; ++i) ck[i] = static_cast<std::uint8_t>(i);
    noise::Hash o1{}, o2{}, o3{};
    noise::hkdf(ck, bytes_of("input key material"), &o1, &o2, &o3);
    EXPECT_EQ(
        hex(o1),
        "a94ec1ceaa5ac0280eafc97980003e4019176e4bf7c914c45fb0bbda0b22a9954d01f3697bbf32817ed0fc"
        "cbf6dd1ebd24c0b05611051e63dc56e131af4f7c10");
    EXPECT_EQ(
        hex(o2),
        "f9d83f6c5d34695529eb8e35c8a2ed78658092e7c3b38fdf0cea2a2096b6f6e542af644e298508f37da088"
        "60db285a8ad4b604c1f160f23356df6b28c183508d");
    EXPECT_EQ(
        hex(o3),
        "bb6f14b645bac5dd79c98ce583e3357b43b431c22400c9b79d690c1d2fe2d391ab8372b0b08553b56e802d"
        "c6badace75398c1b8a973d0aab18d857d431c3a48f");
    noise::hkdf(ck, {}, &o1, &o2, nullptr);
    EXPECT_EQ(
        hex(o1),
        "03be0946afb62e33dcc2e8cb76dfad47663d284d81c0bde963f32a283dede221be2b9e3a86fa82934234d2"
        "a6ed331fb664a3e670252b9454da9ed2567b435e11");
}

TEST(CipherState, NonceIsFourZeroBytesThenLittleEndianCounter) {
    // Encrypting with counter n must equal libsodium's IETF ChaCha20-Poly1305 with that nonce.
    noise::CipherState c;
    noise::Key k{};
    k[0] = 7;
    c.initialize_key(k);
    c.set_nonce(0x0102030405060708ull);
    Bytes out;
    ASSERT_TRUE(c.encrypt_with_ad(bytes_of("ad"), bytes_of("hello"), out));
    noise::CipherState d;
    d.initialize_key(k);
    d.set_nonce(0x0102030405060708ull);
    Bytes plain;
    ASSERT_TRUE(d.decrypt_with_ad(bytes_of("ad"), out, plain));
    EXPECT_EQ(plain, bytes_of("hello"));
    // The same key with the next counter value must not decrypt it.
    noise::CipherState e;
    e.initialize_key(k);
    e.set_nonce(0x0102030405060709ull);
    Bytes bad;
    EXPECT_FALSE(e.decrypt_with_ad(bytes_of("ad"), out, bad));
    EXPECT_EQ(e.nonce(), 0x0102030405060709ull);  // failure does not advance the nonce
}

struct VectorMessage {
    const char* payload;
    const char* ciphertext;
};

// Runs a cacophony vector: both sides with fixed keys; each message must match byte for byte.
void run_vector(noise::Pattern pattern, const char* static_i, const char* static_r,
                const std::vector<VectorMessage>& messages, const char* handshake_hash) {
    const auto prologue = from_hex("4a6f686e2047616c74");
    noise::Key psk{};
    const auto psk_bytes =
        from_hex("54686973206973206d7920417573747269616e20706572737065637469766521");
    std::memcpy(psk.data(), psk_bytes.data(), 32);
    auto keypair = [](const char* h) {
        std::array<std::uint8_t, 32> s{};
        const auto b = from_hex(h);
        std::memcpy(s.data(), b.data(), 32);
        return noise::KeyPair::from_secret(s);
    };
    noise::HandshakeState::Config ci{
        pattern,
        true,
        prologue,
        std::nullopt,
        keypair("893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a"),
        psk};
    noise::HandshakeState::Config cr{
        pattern,
        false,
        prologue,
        std::nullopt,
        keypair("bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b"),
        psk};
    if (static_i) ci.static_key = keypair(static_i);
    if (static_r) cr.static_key = keypair(static_r);
    noise::HandshakeState hi(ci);
    noise::HandshakeState hr(cr);
    const std::size_t n_handshake = pattern.messages.size();
    std::pair<noise::CipherState, noise::CipherState> ki, kr;
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const bool from_initiator = i % 2 == 0;
        const auto payload = from_hex(messages[i].payload);
        Bytes wire;
        Bytes got;
        if (i < n_handshake) {
            noise::HandshakeState& w = from_initiator ? hi : hr;
            noise::HandshakeState& r = from_initiator ? hr : hi;
            ASSERT_TRUE(w.write_message(payload, wire)) << "message " << i;
            ASSERT_EQ(hex(wire), messages[i].ciphertext) << "message " << i;
            ASSERT_TRUE(r.read_message(wire, got)) << "message " << i;
            if (i + 1 == n_handshake) {
                EXPECT_EQ(hex(hi.handshake_hash()), handshake_hash);
                EXPECT_EQ(hex(hr.handshake_hash()), handshake_hash);
                ki = hi.split();
                kr = hr.split();
            }
        } else {
            auto& send = from_initiator ? ki.first : kr.first;
            auto& recv = from_initiator ? kr.second : ki.second;
            ASSERT_TRUE(send.encrypt_with_ad({}, payload, wire));
            ASSERT_EQ(hex(wire), messages[i].ciphertext) << "message " << i;
            ASSERT_TRUE(recv.decrypt_with_ad({}, wire, got));
        }
        EXPECT_EQ(got, payload) << "message " << i;
    }
}

TEST(NoiseVectors, XXpsk3_25519_ChaChaPoly_BLAKE2b) {
    run_vector(
        noise::pattern_xxpsk3(), "e61ef9919cde45dd5f82166404bd08e38bceb5dfdfded0a34c8df7ed542214d1",
        "4a3acbfdb163dec651dfa3194dece676d437029c62a408b4c5ea9114246e4893",
        {
            {"4c756477696720766f6e204d69736573",
             "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c79440aa831d1e3bbd16bd7ff"
             "da87e9f7b6eeca2510006499a573ac27af3392ed1b69"},
            {"4d757272617920526f746862617264",
             "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f14480884381a78489d56c9e2ac962"
             "826f25684980b25244dbfd505b7d903a94d4f4fd84004a1c7fbe94d686bc4c1f67259364f6f2a41cb40b"
             "f5198b9b3975be2cdd49d3e065a554e12c477d82029fabc6555bc1"},
            {"462e20412e20486179656b",
             "291dfeff6eff386e29adb0bdbd5a1ae9e09de4449c8695d109adcb63e80e489555792a3e9150eff75d6d"
             "45571f824ed231173cb66e31e7da914241f86d0cbb678335ffe768a7445d2f5bc1"},
            {"4361726c204d656e676572", "6579dd60eb5e6a8b29dd60004289f5d3c2f69fcdbf683a869f59a8"},
            {"4a65616e2d426170746973746520536179",
             "24715fd39c3c7606e81b26e69e47b54d043d9d87c512f9417bae51ab48ebb17722"},
            {"457567656e2042f6686d20766f6e2042617765726b",
             "e49194a013d873712318643acbf0e3851086326bb168c500a766439ff543a7a1e2deb3215c"},
        },
        "46b5997dfa51492ae9be5b611748455e83aebdbc2ea3c47d264ec6dd408cc076e962ff056890c60398fe3e"
        "7a430bbe057f34383a84df9ff99391266dcfd638b0");
}

TEST(NoiseVectors, NNpsk0_25519_ChaChaPoly_BLAKE2b) {
    run_vector(
        noise::pattern_nnpsk0(), nullptr, nullptr,
        {
            {"4c756477696720766f6e204d69736573",
             "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c7944ed63df2f5a12aee1185e"
             "e9c50305f2ecf12421dcb53c047a63b784cf7c54a105"},
            {"4d757272617920526f746862617264",
             "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f1448088430e0fe7d5c0c9b92f7478"
             "716c8852f1b4f389edb75e3ebe546fafafd5b6f0f7"},
            {"462e20412e20486179656b", "0fe04b26dcfbb69f8a6a94c61f1a26ef88769218d32f5d17c068a6"},
            {"4361726c204d656e676572", "2239e0c540c01f09eb1f4cc5258fd5acfefff18a5a3773f21b7bfe"},
        },
        "ed5e9692d0ab507b6c2beec3f584fd5b127817a9d20b26cd50aa72c507260fa31aa7d88dd3723316338af3"
        "7ce0b4cfb2923aeb848bbf2b934911306f01ffc963");
}

}  // namespace
}  // namespace brigade::mesh
