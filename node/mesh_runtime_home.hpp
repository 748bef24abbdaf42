#pragma once
// What `brigade serve` leaves in BRIGADE_HOME for other commands: the mesh addresses it listens
// on (addresses.json), so that `brigade mesh token` can print a token that says where to dial.

#include <filesystem>
#include <vector>

#include "mesh/errors.hpp"
#include "mesh/identity.hpp"

namespace brigade::node {

// Writes BRIGADE_HOME/addresses.json (replacing it atomically).
mesh::Result<void> save_mesh_addresses(const std::filesystem::path& home,
                                       const std::vector<mesh::PeerAddress>& addresses);
// The addresses saved by the last `brigade serve`; empty when there are none. A garbled file is
// an error that names it.
mesh::Result<std::vector<mesh::PeerAddress>> load_mesh_addresses(const std::filesystem::path& home);

}  // namespace brigade::node
