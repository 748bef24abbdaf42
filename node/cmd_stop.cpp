// `brigade stop`: stops the `brigade serve` of this machine's Brigade home (BRIGADE_HOME, else
// ~/.brigade) as SIGTERM does: a node of a mesh first has the mesh re-plan around it and its
// requests move on, then it exits. Waits until the process is gone (or --timeout passes).
//
//   brigade stop
//   BRIGADE_HOME=/srv/brigade-b brigade stop --timeout 120
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "mesh/identity.hpp"
#include "node/commands.hpp"
#include "node/serve_run.hpp"

namespace brigade::node {
namespace {

struct StopArgs {
    double timeout_s = 60;  // --leave-ms (15 s) + --drain-ms (5 s) by default, and margin
};

int fail(const std::string& message) {
    std::fprintf(stderr, "brigade stop: error: %s\n", message.c_str());
    return 1;
}

int stop_command(const StopArgs& args) {
    if (args.timeout_s <= 0) return fail("--timeout must be > 0");
    const auto home = mesh::default_brigade_home();
    auto run = read_serve_run(home);
    if (!run) return fail(run.error().message);
    if (!*run) {
        return fail("no brigade serve runs with the home " + home.string() + " (no " +
                    serve_run_path(home).string() + "; set BRIGADE_HOME for another node)");
    }
    const ServeRun serve = **run;
    if (!process_running(serve.pid)) {
        remove_serve_run(home, serve.pid);
        return fail("the brigade serve of " + home.string() + " (pid " + std::to_string(serve.pid) +
                    ") is not running; its stale record is removed");
    }
    if (!process_runs_serve(serve.pid)) {
        remove_serve_run(home, serve.pid);
        return fail("pid " + std::to_string(serve.pid) + " of " + home.string() +
                    "'s record runs another program now (the node ended without removing its "
                    "record); nothing signalled, the stale record is removed");
    }
    if (::kill(serve.pid, SIGTERM) != 0) {
        return fail("cannot signal pid " + std::to_string(serve.pid) + ": " + std::strerror(errno));
    }
    std::printf("brigade stop: asked the node at %s (pid %d) to leave and stop\n",
                serve.url.c_str(), serve.pid);
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    const auto limit = std::chrono::duration<double>(args.timeout_s);
    while (process_running(serve.pid)) {
        if (std::chrono::steady_clock::now() - start > limit) {
            return fail("pid " + std::to_string(serve.pid) + " still runs after " +
                        std::to_string(static_cast<int>(args.timeout_s)) +
                        " s (leaving or draining); `kill -9 " + std::to_string(serve.pid) +
                        "` ends it at once, without leaving the mesh");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("brigade stop: stopped after %.1f s\n", took);
    return 0;
}

}  // namespace

void add_stop_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<StopArgs>();
    auto* sub = app.add_subcommand(
        "stop",
        "Stop this machine's brigade serve (of BRIGADE_HOME): it leaves the mesh, which "
        "re-plans around it while its requests move on, then exits");
    sub->add_option("--timeout", args->timeout_s,
                    "Seconds to wait for the node to exit (default 60)");
    commands.add(sub, [args] { return stop_command(*args); });
}

}  // namespace brigade::node
