#pragma once
// In-process links for tests and single-process meshes: two `Link`s joined back to back. Frames
// still go through the real codec (encode, then FrameDecoder with its limits), so serialization
// bugs show up, but there is no encryption and no socket.

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <utility>

#include "mesh/transport.hpp"

namespace brigade::mesh {

std::pair<std::shared_ptr<Link>, std::shared_ptr<Link>> make_loopback_pair(
    const boost::asio::any_io_executor& ex, const NodeId& a, const NodeId& b,
    WireLimits limits = {});

}  // namespace brigade::mesh
