#include <cstdio>

#include "node/commands.hpp"

namespace brigade::node {

// Placeholder until the owning issue lands: the subcommand exists so the CLI builds, and it
// says plainly that it is not implemented yet.
void add_run_command(CLI::App& app, CommandSet& commands) {
    auto* sub = app.add_subcommand("run", "(not implemented yet)");
    sub->allow_extras();
    commands.add(sub, [] {
        std::fprintf(stderr, "brigade run: not implemented yet\n");
        return 1;
    });
}

}  // namespace brigade::node
