// Node keys on disk, node ids, mesh credentials and invite tokens.

#include "mesh/identity.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/support/test_support.hpp"

namespace brigade::mesh {
namespace {

TEST(NodeId, PrintsAs32Base32HexCharsAndParsesBack) {
    const NodeKey k = NodeKey::generate();
    const std::string s = k.id().to_string();
    EXPECT_EQ(s.size(), 32u);
    EXPECT_EQ(s.find_first_not_of("0123456789abcdefghijklmnopqrstuv"), std::string::npos);
    auto parsed = NodeId::parse(s);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, k.id());
    EXPECT_FALSE(NodeId::parse("short"));
    EXPECT_FALSE(NodeId::parse(std::string(32, 'z')));  // 'z' is not base32hex
}

TEST(NodeId, StringOrderIsByteOrder) {
    // The coordinator is the lowest id; people compare printed ids, code compares bytes.
    for (int i = 0; i < 200; ++i) {
        const NodeId a = NodeKey::generate().id();
        const NodeId b = NodeKey::generate().id();
        EXPECT_EQ(a < b, a.to_string() < b.to_string());
    }
}

TEST(NodeId, DerivesFromThePublicKeyOnly) {
    std::array<std::uint8_t, 32> seed{};
    seed[0] = 1;
    const NodeKey a = NodeKey::from_seed(seed);
    const NodeKey b = NodeKey::from_seed(seed);
    EXPECT_EQ(a.id(), b.id());
    EXPECT_EQ(a.id(), node_id_from_public_key(a.public_key()));
    seed[0] = 2;
    EXPECT_NE(NodeKey::from_seed(seed).id(), a.id());
}

TEST(NodeKey, SignaturesVerifyAndX25519FormsMatch) {
    const NodeKey k = NodeKey::generate();
    const std::string msg = "hello";
    const auto sig = k.sign_bytes(reinterpret_cast<const std::uint8_t*>(msg.data()), msg.size());
    EXPECT_TRUE(verify_signature(k.public_key(), reinterpret_cast<const std::uint8_t*>(msg.data()),
                                 msg.size(), sig));
    EXPECT_FALSE(
        verify_signature(k.public_key(), reinterpret_cast<const std::uint8_t*>("hellp"), 5, sig));
    auto x = ed25519_to_x25519_public(k.public_key());
    ASSERT_TRUE(x);
    EXPECT_EQ(*x, k.x25519_public());
}

TEST(NodeKey, CreatedOnceWithMode0600AndReloaded) {
    test::TempDir dir;
    const auto home = dir.path() / "home";
    auto first = load_or_create_node_key(home);
    ASSERT_TRUE(first) << first.error().what();
    struct stat st {};
    ASSERT_EQ(::stat((home / "node.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::stat(home.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    auto second = load_or_create_node_key(home);
    ASSERT_TRUE(second);
    EXPECT_EQ(first->id(), second->id());
    EXPECT_EQ(first->public_key(), second->public_key());
}

TEST(NodeKey, RefusesWorldReadableOrCorruptKeyFiles) {
    test::TempDir dir;
    ASSERT_TRUE(load_or_create_node_key(dir.path()));
    const auto path = dir.path() / "node.key";
    ::chmod(path.c_str(), 0644);
    auto open = load_or_create_node_key(dir.path());
    ASSERT_FALSE(open);
    EXPECT_EQ(open.error().code, errc::bad_identity);
    EXPECT_NE(open.error().message.find("chmod 600"), std::string::npos);
    ::chmod(path.c_str(), 0600);
    test::write_file(path, "not a key\n");
    ::chmod(path.c_str(), 0600);
    auto corrupt = load_or_create_node_key(dir.path());
    ASSERT_FALSE(corrupt);
    EXPECT_EQ(corrupt.error().code, errc::bad_identity);
}

TEST(MeshCredentials, SaveAndLoad) {
    test::TempDir dir;
    const MeshCredentials m = MeshCredentials::generate();
    ASSERT_TRUE(save_mesh_credentials(dir.path(), m));
    struct stat st {};
    ASSERT_EQ(::stat((dir.path() / "mesh.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto loaded = load_mesh_credentials(dir.path());
    ASSERT_TRUE(loaded) << loaded.error().what();
    EXPECT_EQ(loaded->id, m.id);
    EXPECT_EQ(loaded->secret, m.secret);
    EXPECT_FALSE(load_mesh_credentials(dir.path() / "missing"));
}

TEST(PeerAddress, Parses) {
    auto a = parse_peer_address("192.168.1.5:8178");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "192.168.1.5");
    EXPECT_EQ(a->port, 8178);
    auto v6 = parse_peer_address("[fe80::1]:9000");
    ASSERT_TRUE(v6);
    EXPECT_EQ(v6->host, "fe80::1");
    EXPECT_EQ(v6->to_string(), "[fe80::1]:9000");
    auto dflt = parse_peer_address("mini.local", 8178);
    ASSERT_TRUE(dflt);
    EXPECT_EQ(dflt->port, 8178);
    EXPECT_FALSE(parse_peer_address("mini.local"));
    EXPECT_FALSE(parse_peer_address("host:0"));
    EXPECT_FALSE(parse_peer_address("host:65536"));
    EXPECT_FALSE(parse_peer_address("host:80x"));
    EXPECT_FALSE(parse_peer_address("fe80::1:80"));
    EXPECT_FALSE(parse_peer_address(":80"));
}

InviteToken sample_token() {
    InviteToken t;
    t.mesh = MeshCredentials::generate();
    t.addresses = {{"192.168.1.5", 8178}, {"mini.local", 9000}};
    return t;
}

TEST(InviteToken, RoundTrips) {
    const InviteToken t = sample_token();
    const std::string s = encode_invite_token(t);
    EXPECT_TRUE(s.starts_with("brigade1-"));
    EXPECT_EQ(s.find_first_of("+/= \n"), std::string::npos);  // copy-paste safe
    auto back = decode_invite_token(s + "\n");
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(back->mesh.id, t.mesh.id);
    EXPECT_EQ(back->mesh.secret, t.mesh.secret);
    EXPECT_EQ(back->addresses, t.addresses);
}

TEST(InviteToken, BadTokensGiveClearErrors) {
    const std::string good = encode_invite_token(sample_token());
    auto expect_error = [](const std::string& token, const std::string& words) {
        auto r = decode_invite_token(token);
        ASSERT_FALSE(r) << token;
        EXPECT_EQ(r.error().code, errc::bad_token);
        EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
    };
    expect_error("brigade2-" + good.substr(9), "starts with");
    expect_error("brigade1-!!!", "base64url");
    expect_error("brigade1-" + good.substr(9, 11), "truncated");
    expect_error(good.substr(0, 12), "truncated");
    expect_error(good.substr(0, good.size() - 3), "truncated");
    expect_error(good.substr(0, good.size() - 4), "truncated");
    // Any single changed character is caught (checksum), or breaks base64url.
    for (std::size_t i = 9; i < good.size(); ++i) {
        std::string t = good;
        t[i] = t[i] == 'A' ? 'B' : 'A';
        EXPECT_FALSE(decode_invite_token(t)) << "position " << i;
    }
    expect_error("", "starts with");
    expect_error("brigade1-", "truncated");  // found by the fuzzer: empty body
}

}  // namespace
}  // namespace brigade::mesh
