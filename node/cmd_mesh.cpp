// `brigade mesh token` / `brigade mesh id`: this node's identity and the invite token of its mesh
// (issue 6). State lives in BRIGADE_HOME (default ~/.brigade): node.key and mesh.json.

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "mesh/identity.hpp"
#include "node/commands.hpp"
#include "node/mesh_runtime_home.hpp"

namespace brigade::node {
namespace {

// The node key, created on first use; says so on stderr when it was created.
mesh::Result<mesh::NodeKey> node_key(const std::filesystem::path& home, const char* me) {
    std::error_code ec;
    const bool existed = std::filesystem::exists(home / "node.key", ec);
    auto key = mesh::load_or_create_node_key(home);
    if (key && !existed) {
        std::fprintf(stderr, "%s: created node identity %s in %s\n", me,
                     key->id().to_string().c_str(), (home / "node.key").string().c_str());
    }
    return key;
}

int run_mesh_id() {
    const char* const me = "brigade mesh id";
    auto key = node_key(mesh::default_brigade_home(), me);
    if (!key) {
        std::fprintf(stderr, "%s: %s\n", me, key.error().message.c_str());
        return 1;
    }
    std::printf("%s\n", key->id().to_string().c_str());
    return 0;
}

int run_mesh_token() {
    const char* const me = "brigade mesh token";
    const auto home = mesh::default_brigade_home();
    auto key = node_key(home, me);
    if (!key) {
        std::fprintf(stderr, "%s: %s\n", me, key.error().message.c_str());
        return 1;
    }
    std::error_code ec;
    const bool have_mesh = std::filesystem::exists(home / "mesh.json", ec);
    if (ec) {
        std::fprintf(stderr, "%s: cannot check %s: %s\n", me, (home / "mesh.json").string().c_str(),
                     ec.message().c_str());
        return 1;
    }
    mesh::InviteToken token;
    if (have_mesh) {
        auto credentials = mesh::load_mesh_credentials(home);
        if (!credentials) {
            std::fprintf(stderr, "%s: %s\n", me, credentials.error().message.c_str());
            return 1;
        }
        token.mesh = *credentials;
    } else {
        token.mesh = mesh::MeshCredentials::generate();
        if (auto saved = mesh::save_mesh_credentials(home, token.mesh); !saved) {
            std::fprintf(stderr, "%s: %s\n", me, saved.error().message.c_str());
            return 1;
        }
        std::fprintf(stderr, "%s: created a new mesh %s in %s\n", me,
                     token.mesh.id.to_string().c_str(), (home / "mesh.json").string().c_str());
    }
    // Where to dial: what the last `brigade serve` of this home listened on.
    auto addresses = load_mesh_addresses(home);
    if (!addresses) {
        std::fprintf(stderr, "%s: %s\n", me, addresses.error().message.c_str());
        return 1;
    }
    token.addresses = std::move(*addresses);
    if (token.addresses.empty()) {
        std::fprintf(stderr,
                     "%s: no addresses in the token (run `brigade serve` once, or give joiners "
                     "--peer HOST:PORT)\n",
                     me);
    }
    std::printf("%s\n", mesh::encode_invite_token(token).c_str());
    return 0;
}

}  // namespace

void add_mesh_command(CLI::App& app, CommandSet& commands) {
    auto* sub = app.add_subcommand("mesh", "This node's identity and the invite token of its mesh");
    sub->require_subcommand(1);
    sub->footer(
        "State lives in $BRIGADE_HOME (default ~/.brigade): node.key, mesh.json and "
        "addresses.json (the mesh addresses of the last `brigade serve`).");
    auto* token = sub->add_subcommand(
        "token", "Print the invite token of this node's mesh (creates a new mesh if none exists)");
    commands.add(token, [] { return run_mesh_token(); });
    auto* id = sub->add_subcommand("id", "Print this node's id (creates the node key if needed)");
    commands.add(id, [] { return run_mesh_id(); });
}

}  // namespace brigade::node
