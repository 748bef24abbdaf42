#pragma once
// spdlog setup for the node (house guide §4: only node/ configures spdlog; libraries get a
// logger handle or a log callback).

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace brigade::node {

// A logger writing "[time] [level] name: message" lines to stderr. Not registered globally:
// the caller passes it to whatever needs it.
std::shared_ptr<spdlog::logger> make_stderr_logger(const std::string& name,
                                                   spdlog::level::level_enum level);

}  // namespace brigade::node
