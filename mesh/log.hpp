#pragma once
// Libraries log through a handle the node gives them (house guide §4); only node/ configures
// spdlog. An empty sink drops messages.

#include <functional>
#include <string_view>

namespace brigade::mesh {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

using LogSink = std::function<void(LogLevel, std::string_view)>;

inline void log_to(const LogSink& sink, LogLevel level, std::string_view message) {
    if (sink) sink(level, message);
}

}  // namespace brigade::mesh
