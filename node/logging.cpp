#include "node/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>

namespace brigade::node {

std::shared_ptr<spdlog::logger> make_stderr_logger(const std::string& name,
                                                   spdlog::level::level_enum level) {
    // The mutex sink: the compute thread and the I/O threads log at the same time.
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto logger = std::make_shared<spdlog::logger>(name, sink);
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %n: %v");
    logger->set_level(level);
    logger->flush_on(spdlog::level::info);  // one line per request; tests read them at once
    return logger;
}

}  // namespace brigade::node
