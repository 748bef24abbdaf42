// brigade: one node of a mesh that serves an LLM. argv → subcommand → exit code.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "node/commands.hpp"

int main(int argc, char** argv) {
    CLI::App app{"brigade: turn a handful of machines into one LLM server"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every subcommand");

    brigade::node::CommandSet commands;
    brigade::node::add_version_command(app, commands);
    brigade::node::add_run_command(app, commands);
    brigade::node::add_tokenize_command(app, commands);
    brigade::node::add_template_command(app, commands);
    brigade::node::add_perplexity_command(app, commands);
    brigade::node::add_serve_command(app, commands);
    brigade::node::add_chat_command(app, commands);
    brigade::node::add_plan_command(app, commands);
    brigade::node::add_mesh_command(app, commands);
    brigade::node::add_status_command(app, commands);
    brigade::node::add_stop_command(app, commands);

    CLI11_PARSE(app, argc, argv);
    try {
        return commands.dispatch();
    } catch (const std::exception& e) {
        // Startup and config errors end here: a clear message and a non-zero exit.
        std::fprintf(stderr, "brigade: error: %s\n", e.what());
        return 1;
    }
}
