#include "node/mesh_runtime_home.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace brigade::node {

namespace {
constexpr const char* kFile = "addresses.json";
}

mesh::Result<void> save_mesh_addresses(const std::filesystem::path& home,
                                       const std::vector<mesh::PeerAddress>& addresses) {
    nlohmann::json list = nlohmann::json::array();
    for (const mesh::PeerAddress& a : addresses) list.push_back(a.to_string());
    const auto path = home / kFile;
    const auto tmp = home / (std::string(kFile) + ".tmp");
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << nlohmann::json{{"addresses", list}}.dump(1) << "\n";
        if (!out) {
            return mesh::make_error(mesh::errc::io_error, "cannot write " + tmp.string());
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        return mesh::make_error(mesh::errc::io_error,
                                "cannot replace " + path.string() + ": " + ec.message());
    }
    return {};
}

mesh::Result<std::vector<mesh::PeerAddress>> load_mesh_addresses(
    const std::filesystem::path& home) {
    const auto path = home / kFile;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::vector<mesh::PeerAddress>{};
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("addresses") ||
        !doc["addresses"].is_array()) {
        return mesh::make_error(mesh::errc::invalid_argument,
                                path.string() + " is not {\"addresses\": [\"host:port\", ...]}");
    }
    std::vector<mesh::PeerAddress> out;
    for (const auto& a : doc["addresses"]) {
        if (!a.is_string()) {
            return mesh::make_error(mesh::errc::invalid_argument,
                                    path.string() + ": an address is not a string");
        }
        auto parsed = mesh::parse_peer_address(a.get<std::string>());
        if (!parsed) {
            return mesh::make_error(mesh::errc::invalid_argument,
                                    path.string() + ": " + parsed.error().message);
        }
        out.push_back(*parsed);
        if (out.size() == mesh::kMaxTokenAddresses) break;
    }
    return out;
}

}  // namespace brigade::node
