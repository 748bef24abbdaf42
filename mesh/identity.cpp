#include "mesh/identity.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mesh/bytes.hpp"
#include "mesh/sodium_init.hpp"

namespace brigade::mesh {

void ensure_sodium_initialized() {
    if (sodium_init() < 0) {
        // No entropy source: nothing in the mesh can work; this is a platform failure at startup.
        std::fprintf(stderr, "brigade: libsodium failed to initialise\n");
        std::abort();
    }
}

namespace {

constexpr char kBase32Hex[] = "0123456789abcdefghijklmnopqrstuv";

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

template <std::size_t N>
bool parse_hex(std::string_view text, std::array<std::uint8_t, N>& out) {
    if (text.size() != 2 * N) return false;
    for (std::size_t i = 0; i < N; ++i) {
        const int hi = hex_value(text[2 * i]);
        const int lo = hex_value(text[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return true;
}

std::string errno_text() { return std::strerror(errno); }

// Writes `contents` to `path` with mode 0600: a temp file created with O_EXCL, then renamed, so a
// crash never leaves a half-written key and the secret is never world-readable, even briefly.
Result<void> write_private_file(const std::filesystem::path& path, const std::string& contents) {
    const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        return make_error(errc::io_error, "cannot create " + tmp.string() + ": " + errno_text());
    }
    std::size_t done = 0;
    while (done < contents.size()) {
        const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            const std::string why = errno_text();
            ::close(fd);
            ::unlink(tmp.c_str());
            return make_error(errc::io_error, "cannot write " + tmp.string() + ": " + why);
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(tmp.c_str());
        return make_error(errc::io_error, "cannot flush " + tmp.string() + ": " + errno_text());
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = errno_text();
        ::unlink(tmp.c_str());
        return make_error(errc::io_error, "cannot rename to " + path.string() + ": " + why);
    }
    return {};
}

// Reads a secret file, refusing one that group or others can read.
Result<std::string> read_private_file(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return make_error(errc::io_error, "cannot open " + path.string() + ": " + errno_text());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string why = errno_text();
        ::close(fd);
        return make_error(errc::io_error, "cannot stat " + path.string() + ": " + why);
    }
    if ((st.st_mode & 077) != 0) {
        ::close(fd);
        return make_error(
            errc::bad_identity,
            path.string() + " is accessible by group or others; run chmod 600 " + path.string());
    }
    if (st.st_size > 64 * 1024) {
        ::close(fd);
        return make_error(errc::bad_identity, path.string() + " is too large to be a key file");
    }
    std::string data(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    data.resize(done);
    return data;
}

Result<void> ensure_home(const std::filesystem::path& home) {
    std::error_code ec;
    if (std::filesystem::is_directory(home, ec)) return {};
    std::filesystem::create_directories(home, ec);
    if (ec)
        return make_error(errc::io_error, "cannot create " + home.string() + ": " + ec.message());
    ::chmod(home.c_str(), 0700);
    return {};
}

}  // namespace

std::string NodeId::to_string() const {
    // 160 bits = exactly 32 base32 digits, most significant first.
    std::string s;
    s.reserve(32);
    std::uint32_t acc = 0;
    int bits = 0;
    for (std::uint8_t b : bytes) {
        acc = (acc << 8) | b;
        bits += 8;
        while (bits >= 5) {
            bits -= 5;
            s.push_back(kBase32Hex[(acc >> bits) & 31]);
        }
    }
    return s;
}

Result<NodeId> NodeId::parse(std::string_view text) {
    if (text.size() != 32) {
        return make_error(errc::invalid_argument, "a node id has 32 base32hex characters, got " +
                                                      std::to_string(text.size()));
    }
    NodeId id;
    std::uint32_t acc = 0;
    int bits = 0;
    std::size_t out = 0;
    for (char c : text) {
        const char lc = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        const char* p = std::strchr(kBase32Hex, lc);
        if (lc == '\0' || p == nullptr) {
            return make_error(errc::invalid_argument,
                              "bad character in node id '" + std::string(text) + "'");
        }
        acc = (acc << 5) | static_cast<std::uint32_t>(p - kBase32Hex);
        bits += 5;
        if (bits >= 8) {
            bits -= 8;
            id.bytes[out++] = static_cast<std::uint8_t>(acc >> bits);
        }
    }
    return id;
}

bool NodeId::is_zero() const {
    for (std::uint8_t b : bytes)
        if (b != 0) return false;
    return true;
}

std::string MeshId::to_string() const { return to_hex(bytes); }

Result<MeshId> MeshId::parse(std::string_view text) {
    MeshId id;
    if (!parse_hex(text, id.bytes)) {
        return make_error(errc::invalid_argument, "a mesh id has 32 hex characters");
    }
    return id;
}

NodeId node_id_from_public_key(const Ed25519PublicKey& pk) {
    // A context prefix keeps this hash distinct from every other BLAKE2b use in the protocol.
    static constexpr char kContext[] = "brigade node id v1";
    NodeId id;
    crypto_generichash_state st;
    crypto_generichash_init(&st, nullptr, 0, id.bytes.size());
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kContext),
                              sizeof(kContext) - 1);
    crypto_generichash_update(&st, pk.data(), pk.size());
    crypto_generichash_final(&st, id.bytes.data(), id.bytes.size());
    return id;
}

NodeKey NodeKey::generate() {
    ensure_sodium_initialized();
    std::array<std::uint8_t, 32> seed{};
    randombytes_buf(seed.data(), seed.size());
    NodeKey k = from_seed(seed);
    sodium_memzero(seed.data(), seed.size());
    return k;
}

NodeKey NodeKey::from_seed(const std::array<std::uint8_t, 32>& seed) {
    ensure_sodium_initialized();
    NodeKey k;
    crypto_sign_seed_keypair(k.public_key_.data(), k.secret_key_.data(), seed.data());
    k.id_ = node_id_from_public_key(k.public_key_);
    return k;
}

NodeKey::NodeKey(NodeKey&& o) noexcept
    : secret_key_(o.secret_key_), public_key_(o.public_key_), id_(o.id_) {
    sodium_memzero(o.secret_key_.data(), o.secret_key_.size());
}

NodeKey& NodeKey::operator=(NodeKey&& o) noexcept {
    if (this != &o) {
        secret_key_ = o.secret_key_;
        public_key_ = o.public_key_;
        id_ = o.id_;
        sodium_memzero(o.secret_key_.data(), o.secret_key_.size());
    }
    return *this;
}

NodeKey::~NodeKey() { sodium_memzero(secret_key_.data(), secret_key_.size()); }

std::array<std::uint8_t, 64> NodeKey::sign_bytes(const std::uint8_t* data, std::size_t n) const {
    std::array<std::uint8_t, 64> sig{};
    crypto_sign_detached(sig.data(), nullptr, data, n, secret_key_.data());
    return sig;
}

std::array<std::uint8_t, 32> NodeKey::seed() const {
    std::array<std::uint8_t, 32> s{};
    std::memcpy(s.data(), secret_key_.data(), s.size());  // libsodium: sk = seed || pk
    return s;
}

X25519Key NodeKey::x25519_secret() const {
    X25519Key k{};
    crypto_sign_ed25519_sk_to_curve25519(k.data(), secret_key_.data());
    return k;
}

X25519Key NodeKey::x25519_public() const {
    X25519Key k{};
    // Cannot fail for a key libsodium generated itself.
    if (crypto_sign_ed25519_pk_to_curve25519(k.data(), public_key_.data()) != 0) k.fill(0);
    return k;
}

bool verify_signature(const Ed25519PublicKey& pk, const std::uint8_t* data, std::size_t n,
                      const std::array<std::uint8_t, 64>& signature) {
    return crypto_sign_verify_detached(signature.data(), data, n, pk.data()) == 0;
}

std::uint64_t new_incarnation() {
    ensure_sodium_initialized();
    std::uint64_t x = 0;
    while (x == 0) randombytes_buf(&x, sizeof x);
    return x;
}

Result<X25519Key> ed25519_to_x25519_public(const Ed25519PublicKey& pk) {
    X25519Key k{};
    if (crypto_sign_ed25519_pk_to_curve25519(k.data(), pk.data()) != 0) {
        return make_error(errc::bad_identity, "peer's Ed25519 public key is not a valid point");
    }
    return k;
}

std::filesystem::path default_brigade_home() {
    if (const char* env = std::getenv("BRIGADE_HOME"); env != nullptr && *env != '\0') return env;
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
        return std::filesystem::path(home) / ".brigade";
    }
    return std::filesystem::path(".brigade");
}

Result<NodeKey> load_or_create_node_key(const std::filesystem::path& home) {
    static constexpr std::string_view kHeader = "brigade-node-key-v1 ";
    if (auto r = ensure_home(home); !r) return r.error();
    const std::filesystem::path path = home / "node.key";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        NodeKey key = NodeKey::generate();
        // Only the 32-byte seed is stored; the rest of the key is derived from it.
        std::string text(kHeader);
        std::array<std::uint8_t, 32> seed = key.seed();
        text += to_hex(seed) + "\n";
        sodium_memzero(seed.data(), seed.size());
        auto w = write_private_file(path, text);
        sodium_memzero(text.data(), text.size());
        if (!w) {
            // Another process may have created it first (O_EXCL on the temp file, rename is
            // atomic); fall through and read whatever is there.
            if (!std::filesystem::exists(path, ec)) return w.error();
        } else {
            return key;
        }
    }
    auto text = read_private_file(path);
    if (!text) return text.error();
    std::string_view body(*text);
    while (!body.empty() && (body.back() == '\n' || body.back() == '\r' || body.back() == ' ')) {
        body.remove_suffix(1);
    }
    std::array<std::uint8_t, 32> seed{};
    if (!body.starts_with(kHeader) || !parse_hex(body.substr(kHeader.size()), seed)) {
        sodium_memzero(text->data(), text->size());
        return make_error(errc::bad_identity, path.string() + " is not a brigade node key");
    }
    sodium_memzero(text->data(), text->size());
    NodeKey key = NodeKey::from_seed(seed);
    sodium_memzero(seed.data(), seed.size());
    return key;
}

std::string PeerAddress::to_string() const {
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

Result<PeerAddress> parse_peer_address(std::string_view text, std::uint16_t default_port) {
    const std::string original(text);
    PeerAddress a;
    std::string_view port_text;
    if (text.starts_with("[")) {
        const std::size_t close = text.find(']');
        if (close == std::string_view::npos) {
            return make_error(errc::invalid_argument, "unclosed '[' in address '" + original + "'");
        }
        a.host = std::string(text.substr(1, close - 1));
        std::string_view rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':') {
                return make_error(errc::invalid_argument,
                                  "expected ':' after ']' in '" + original + "'");
            }
            port_text = rest.substr(1);
        }
    } else {
        const std::size_t colon = text.rfind(':');
        if (colon != std::string_view::npos && text.find(':') != colon) {
            return make_error(
                errc::invalid_argument,
                "IPv6 addresses need brackets, e.g. [::1]:8178, got '" + original + "'");
        }
        a.host = std::string(text.substr(0, colon));
        if (colon != std::string_view::npos) port_text = text.substr(colon + 1);
    }
    if (a.host.empty() || a.host.size() > 253) {
        return make_error(errc::invalid_argument, "bad host in address '" + original + "'");
    }
    if (port_text.empty()) {
        if (default_port == 0) {
            return make_error(errc::invalid_argument, "address '" + original + "' needs a port");
        }
        a.port = default_port;
        return a;
    }
    unsigned long port = 0;
    for (char c : port_text) {
        if (c < '0' || c > '9' || port > 65535) {
            return make_error(errc::invalid_argument, "bad port in address '" + original + "'");
        }
        port = port * 10 + static_cast<unsigned long>(c - '0');
    }
    if (port == 0 || port > 65535) {
        return make_error(errc::invalid_argument,
                          "port out of range in address '" + original + "'");
    }
    a.port = static_cast<std::uint16_t>(port);
    return a;
}

MeshCredentials MeshCredentials::generate() {
    ensure_sodium_initialized();
    MeshCredentials m;
    randombytes_buf(m.id.bytes.data(), m.id.bytes.size());
    randombytes_buf(m.secret.data(), m.secret.size());
    return m;
}

Result<MeshCredentials> load_mesh_credentials(const std::filesystem::path& home) {
    const std::filesystem::path path = home / "mesh.json";
    auto text = read_private_file(path);
    if (!text) return text.error();
    MeshCredentials m;
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    sodium_memzero(text->data(), text->size());
    if (!j.is_object() || !j.contains("mesh_id") || !j.contains("secret") ||
        !j["mesh_id"].is_string() || !j["secret"].is_string()) {
        return make_error(errc::bad_identity,
                          path.string() + ": expected {\"mesh_id\", \"secret\"}");
    }
    auto id = MeshId::parse(j["mesh_id"].get<std::string>());
    if (!id) return make_error(errc::bad_identity, path.string() + ": bad mesh_id");
    m.id = *id;
    if (!parse_hex(j["secret"].get<std::string>(), m.secret)) {
        return make_error(errc::bad_identity, path.string() + ": secret must be 64 hex characters");
    }
    return m;
}

Result<void> save_mesh_credentials(const std::filesystem::path& home, const MeshCredentials& mesh) {
    if (auto r = ensure_home(home); !r) return r.error();
    nlohmann::json j;
    j["mesh_id"] = mesh.id.to_string();
    j["secret"] = to_hex(mesh.secret);
    std::string text = j.dump(2) + "\n";
    auto r = write_private_file(home / "mesh.json", text);
    sodium_memzero(text.data(), text.size());
    return r;
}

namespace {

constexpr std::uint8_t kTokenVersion = 1;
constexpr std::size_t kTokenChecksumBytes = 4;

std::array<std::uint8_t, kTokenChecksumBytes> token_checksum(ByteSpan body) {
    std::array<std::uint8_t, 32> h{};
    crypto_generichash(h.data(), h.size(), body.data(), body.size(), nullptr, 0);
    std::array<std::uint8_t, kTokenChecksumBytes> c{};
    std::memcpy(c.data(), h.data(), c.size());
    return c;
}

}  // namespace

std::string encode_invite_token(const InviteToken& token) {
    Bytes body;
    ByteWriter w(body);
    w.u8(kTokenVersion);
    w.array(token.mesh.id.bytes);
    w.array(token.mesh.secret);
    const std::size_t n = std::min(token.addresses.size(), kMaxTokenAddresses);
    w.u8(static_cast<std::uint8_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
        const std::string& host = token.addresses[i].host;
        const std::size_t len = std::min<std::size_t>(host.size(), 255);
        w.u8(static_cast<std::uint8_t>(len));
        w.raw({reinterpret_cast<const std::uint8_t*>(host.data()), len});
        w.u16(token.addresses[i].port);
    }
    const auto sum = token_checksum(body);
    w.raw(sum);
    const std::size_t b64_len =
        sodium_base64_encoded_len(body.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    std::string b64(b64_len, '\0');
    sodium_bin2base64(b64.data(), b64.size(), body.data(), body.size(),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    b64.resize(std::strlen(b64.c_str()));
    sodium_memzero(body.data(), body.size());
    return std::string(kInviteTokenPrefix) + b64;
}

Result<InviteToken> decode_invite_token(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
        text.remove_suffix(1);
    }
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    if (!text.starts_with(kInviteTokenPrefix)) {
        return make_error(errc::bad_token, "an invite token starts with 'brigade1-'");
    }
    text.remove_prefix(kInviteTokenPrefix.size());
    if (text.size() > 8192) return make_error(errc::bad_token, "invite token is too long");
    if (text.empty())
        return make_error(errc::bad_token, "invite token is truncated (copy it whole)");
    Bytes body(text.size());
    std::size_t n = 0;
    if (sodium_base642bin(body.data(), body.size(), text.data(), text.size(), nullptr, &n, nullptr,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0) {
        const bool alphabet_ok =
            text.find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
            std::string_view::npos;
        return make_error(errc::bad_token,
                          alphabet_ok ? "invite token is truncated or altered (copy it whole)"
                                      : "invite token contains characters that are not "
                                        "base64url (copy it whole)");
    }
    body.resize(n);
    // version + mesh id + secret + address count + checksum
    constexpr std::size_t kMinBytes = 1 + 16 + 32 + 1 + kTokenChecksumBytes;
    if (body.size() < kMinBytes) {
        return make_error(errc::bad_token, "invite token is truncated (copy it whole)");
    }
    const ByteSpan payload(body.data(), body.size() - kTokenChecksumBytes);
    const auto expected = token_checksum(payload);
    if (std::memcmp(expected.data(), body.data() + payload.size(), kTokenChecksumBytes) != 0) {
        return make_error(errc::bad_token,
                          "invite token checksum mismatch: it was mistyped, truncated or altered");
    }
    ByteReader r(payload);
    const std::uint8_t version = r.u8();
    if (version != kTokenVersion) {
        return make_error(errc::bad_token, "invite token version " + std::to_string(version) +
                                               " is not supported by this brigade (expects 1)");
    }
    InviteToken token;
    token.mesh.id.bytes = r.array<16>();
    token.mesh.secret = r.array<32>();
    const std::uint8_t n_addresses = r.u8();
    if (n_addresses > kMaxTokenAddresses) {
        return make_error(errc::bad_token, "invite token lists too many addresses");
    }
    for (std::uint8_t i = 0; i < n_addresses; ++i) {
        const std::uint8_t len = r.u8();
        ByteSpan host = r.raw(len);
        const std::uint16_t port = r.u16();
        if (!r.ok()) break;
        PeerAddress a{std::string(reinterpret_cast<const char*>(host.data()), host.size()), port};
        if (a.host.empty() || a.port == 0) {
            return make_error(errc::bad_token, "invite token holds an empty host or port 0");
        }
        token.addresses.push_back(std::move(a));
    }
    if (!r.ok() || r.remaining() != 0) {
        return make_error(errc::bad_token, "invite token body has the wrong length");
    }
    sodium_memzero(body.data(), body.size());
    return token;
}

}  // namespace brigade::mesh
