#include <cstdio>

#include "node/commands.hpp"

namespace brigade::node {

void add_version_command(CLI::App& app, CommandSet& commands) {
    auto* sub = app.add_subcommand("version", "Print the version of this build");
    commands.add(sub, [] {
        std::printf("brigade 0.1.0\n");
        return 0;
    });
}

}  // namespace brigade::node
