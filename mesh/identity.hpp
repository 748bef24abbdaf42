#pragma once
// Who a node is and which mesh it belongs to.
//
// - `NodeKey`: a persistent Ed25519 key pair in BRIGADE_HOME (default ~/.brigade/node.key, mode
//   0600, created on first use). Its X25519 form is the Noise static key of every link.
// - `NodeId`: BLAKE2b-160 of the Ed25519 public key, printed as 32 base32hex characters
//   (RFC 4648 §7, lower case). base32hex keeps the byte order, so comparing printed ids gives the
//   same answer as comparing bytes (the coordinator is the lowest id).
// - `MeshCredentials`: a random 16-byte mesh id and a 32-byte secret (the Noise PSK and the key
//   of discovery beacons), stored in BRIGADE_HOME/mesh.json (mode 0600).
// - Invite token: `brigade1-` + base64url(version, mesh id, secret, addresses, checksum).

#include <array>
#include <compare>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/errors.hpp"

namespace brigade::mesh {

struct NodeId {
    std::array<std::uint8_t, 20> bytes{};

    std::string to_string() const;  // 32 characters of base32hex
    std::string short_string() const { return to_string().substr(0, 8); }  // for log lines
    static Result<NodeId> parse(std::string_view text);
    bool is_zero() const;

    auto operator<=>(const NodeId&) const = default;
    bool operator==(const NodeId&) const = default;
};

struct MeshId {
    std::array<std::uint8_t, 16> bytes{};

    std::string to_string() const;  // 32 hex characters
    static Result<MeshId> parse(std::string_view text);

    auto operator<=>(const MeshId&) const = default;
    bool operator==(const MeshId&) const = default;
};

using Ed25519PublicKey = std::array<std::uint8_t, 32>;
using X25519Key = std::array<std::uint8_t, 32>;
using MeshSecret = std::array<std::uint8_t, 32>;

NodeId node_id_from_public_key(const Ed25519PublicKey& pk);

// An Ed25519 key pair. Holds secret material: not copyable by accident, wiped on destruction.
class NodeKey {
public:
    static NodeKey generate();
    static NodeKey from_seed(const std::array<std::uint8_t, 32>& seed);

    NodeKey(NodeKey&&) noexcept;
    NodeKey& operator=(NodeKey&&) noexcept;
    NodeKey(const NodeKey&) = delete;
    NodeKey& operator=(const NodeKey&) = delete;
    ~NodeKey();

    const Ed25519PublicKey& public_key() const { return public_key_; }
    const NodeId& id() const { return id_; }
    std::array<std::uint8_t, 64> sign_bytes(const std::uint8_t* data, std::size_t n) const;
    // The X25519 form of this key (libsodium's birational map), used as the Noise static key.
    X25519Key x25519_secret() const;
    X25519Key x25519_public() const;
    // The 32-byte seed the whole key derives from (what node.key stores). Secret.
    std::array<std::uint8_t, 32> seed() const;

private:
    NodeKey() = default;
    std::array<std::uint8_t, 64> secret_key_{};  // libsodium layout: seed || public key
    Ed25519PublicKey public_key_{};
    NodeId id_{};
};

bool verify_signature(const Ed25519PublicKey& pk, const std::uint8_t* data, std::size_t n,
                      const std::array<std::uint8_t, 64>& signature);
// libsodium's Ed25519 -> X25519 public key map; fails for keys not on the curve.
Result<X25519Key> ed25519_to_x25519_public(const Ed25519PublicKey& pk);

// A random, nonzero number naming one run of a node process (Hello::incarnation).
std::uint64_t new_incarnation();

// BRIGADE_HOME if set, else $HOME/.brigade. Reads the environment; call once at startup and pass
// the path on.
std::filesystem::path default_brigade_home();

// Loads BRIGADE_HOME/node.key, creating it (and the directory, mode 0700) on first use. Refuses a
// key file readable by group or others, as ssh does.
Result<NodeKey> load_or_create_node_key(const std::filesystem::path& home);

struct PeerAddress {
    std::string host;
    std::uint16_t port = 0;

    std::string to_string() const;  // host:port, IPv6 hosts in brackets
    bool operator==(const PeerAddress&) const = default;
    auto operator<=>(const PeerAddress&) const = default;
};

// Parses "host:port", "[v6]:port"; a missing port takes `default_port` when it is non-zero.
Result<PeerAddress> parse_peer_address(std::string_view text, std::uint16_t default_port = 0);

struct MeshCredentials {
    MeshId id;
    MeshSecret secret{};

    static MeshCredentials generate();
};

// BRIGADE_HOME/mesh.json: the mesh this node belongs to.
Result<MeshCredentials> load_mesh_credentials(const std::filesystem::path& home);
Result<void> save_mesh_credentials(const std::filesystem::path& home, const MeshCredentials& mesh);

struct InviteToken {
    MeshCredentials mesh;
    std::vector<PeerAddress> addresses;  // where to reach a member; at most kMaxTokenAddresses
};

inline constexpr std::string_view kInviteTokenPrefix = "brigade1-";
inline constexpr std::size_t kMaxTokenAddresses = 16;

std::string encode_invite_token(const InviteToken& token);
// Clear errors for a wrong prefix, bad base64url, truncation, unknown version, a failed checksum
// (typo or tampering), or a bad address.
Result<InviteToken> decode_invite_token(std::string_view text);

}  // namespace brigade::mesh

template <>
struct std::hash<brigade::mesh::NodeId> {
    std::size_t operator()(const brigade::mesh::NodeId& id) const noexcept {
        std::size_t h = 0;
        for (int i = 0; i < 8; ++i) h = (h << 8) | id.bytes[i];
        return h;
    }
};
