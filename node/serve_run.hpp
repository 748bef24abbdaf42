#pragma once
// The record a running `brigade serve` keeps in its home (BRIGADE_HOME/serve.json), so that
// `brigade stop` on the same machine finds it: its process id, where it answers, when it
// started. Only a signal stops the node (SIGTERM: it leaves the mesh, then exits): nothing on
// the network can, so a node bound to the LAN cannot be stopped by whoever reaches its port.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "model/errors.hpp"

namespace brigade::node {

struct ServeRun {
    int pid = 0;
    std::string url;                // where its API answers, e.g. http://127.0.0.1:8177
    std::int64_t started_unix = 0;  // seconds since the epoch
    bool operator==(const ServeRun&) const = default;
};

std::filesystem::path serve_run_path(const std::filesystem::path& home);

std::string encode_serve_run(const ServeRun& run);
// Rejects anything but {"pid": >0, "url": string, "started_unix": integer}, naming what is wrong.
model::Result<ServeRun> decode_serve_run(std::string_view text);

// Writes `run` to the home (created, mode 0700, where missing) through a temporary file.
model::Result<void> write_serve_run(const std::filesystem::path& home, const ServeRun& run);
// nullopt where there is no record.
model::Result<std::optional<ServeRun>> read_serve_run(const std::filesystem::path& home);
// Removes the record if it is still the one of process `pid` (a later run may have replaced it).
void remove_serve_run(const std::filesystem::path& home, int pid);

// Whether process `pid` still runs: false once it has exited, also while it waits as a zombie
// for its parent (Linux: the state letter of /proc/<pid>/stat).
bool process_running(int pid);
// Whether process `pid` is (still) a `brigade serve`, so that a record left by a crashed node
// whose pid went to another program makes `brigade stop` signal nothing: on Linux, its
// /proc/<pid>/cmdline has a "serve" argument; where there is no /proc, true.
bool process_runs_serve(int pid);
// The same test on the NUL-separated arguments of a /proc/<pid>/cmdline.
bool cmdline_runs_serve(std::string_view cmdline);

// The state letter of a /proc/<pid>/stat line ('R', 'S', 'Z', ...), or '?' where malformed.
// The command name in parentheses may itself hold spaces and parentheses.
char proc_stat_state(std::string_view stat_line);

}  // namespace brigade::node
