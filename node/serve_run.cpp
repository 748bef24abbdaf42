#include "node/serve_run.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace brigade::node {

std::filesystem::path serve_run_path(const std::filesystem::path& home) {
    return home / "serve.json";
}

std::string encode_serve_run(const ServeRun& run) {
    return nlohmann::json{{"pid", run.pid}, {"url", run.url}, {"started_unix", run.started_unix}}
               .dump(1) +
           "\n";
}

model::Result<ServeRun> decode_serve_run(std::string_view text) {
    const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto bad = [](const std::string& why) {
        return model::make_error(model::errc::invalid_argument, "serve.json: " + why);
    };
    if (!doc.is_object()) return bad("not a JSON object");
    if (!doc.contains("pid") || !doc["pid"].is_number_integer() ||
        doc["pid"].get<long long>() <= 0 ||
        doc["pid"].get<long long>() > std::numeric_limits<int>::max()) {
        return bad("no positive process id (\"pid\")");
    }
    if (!doc.contains("url") || !doc["url"].is_string()) return bad("no \"url\" string");
    if (!doc.contains("started_unix") || !doc["started_unix"].is_number_integer()) {
        return bad("no \"started_unix\" integer");
    }
    return ServeRun{static_cast<int>(doc["pid"].get<long long>()), doc["url"].get<std::string>(),
                    doc["started_unix"].get<std::int64_t>()};
}

model::Result<void> write_serve_run(const std::filesystem::path& home, const ServeRun& run) {
    std::error_code ec;
    if (!std::filesystem::exists(home, ec)) {
        std::filesystem::create_directories(home, ec);
        if (ec) {
            return model::make_error(model::errc::io_error,
                                     "cannot create " + home.string() + ": " + ec.message());
        }
        ::chmod(home.c_str(), 0700);
    }
    const auto path = serve_run_path(home);
    const auto tmp = home / ("serve.json." + std::to_string(run.pid) + ".tmp");
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << encode_serve_run(run);
        if (!out) return model::make_error(model::errc::io_error, "cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        return model::make_error(model::errc::io_error, "cannot replace " + path.string());
    }
    return {};
}

model::Result<std::optional<ServeRun>> read_serve_run(const std::filesystem::path& home) {
    const auto path = serve_run_path(home);
    std::ifstream in(path);
    if (!in) return std::optional<ServeRun>{};
    std::stringstream text;
    text << in.rdbuf();
    auto run = decode_serve_run(text.str());
    if (!run) {
        return model::make_error(model::errc::invalid_argument,
                                 path.string() + ": " + run.error().message);
    }
    return std::optional<ServeRun>{*run};
}

void remove_serve_run(const std::filesystem::path& home, int pid) {
    auto run = read_serve_run(home);
    if (!run || !*run || (*run)->pid != pid) return;
    std::error_code ec;
    std::filesystem::remove(serve_run_path(home), ec);
}

char proc_stat_state(std::string_view stat_line) {
    // "pid (comm) S ...": the state follows the last ')'.
    const auto close = stat_line.rfind(')');
    if (close == std::string_view::npos || close + 2 >= stat_line.size() ||
        stat_line[close + 1] != ' ') {
        return '?';
    }
    return stat_line[close + 2];
}

bool cmdline_runs_serve(std::string_view cmdline) {
    std::size_t start = 0;
    for (int arg = 0; start < cmdline.size(); ++arg) {
        auto end = cmdline.find('\0', start);
        if (end == std::string_view::npos) end = cmdline.size();
        // argv[0] is the program; the subcommand comes after it (and after any global option).
        if (arg > 0 && cmdline.substr(start, end - start) == "serve") return true;
        start = end + 1;
    }
    return false;
}

bool process_runs_serve(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    if (!in) {
        std::error_code ec;
        return !std::filesystem::exists("/proc/self", ec);  // no /proc: cannot tell
    }
    std::stringstream text;
    text << in.rdbuf();
    return cmdline_runs_serve(text.str());
}

bool process_running(int pid) {
    if (pid <= 0) return false;
    if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (stat && std::getline(stat, line)) {
        const char state = proc_stat_state(line);
        return state != 'Z' && state != 'X';
    }
    return true;  // no /proc (macOS): kill(pid, 0) said it exists
}

}  // namespace brigade::node
