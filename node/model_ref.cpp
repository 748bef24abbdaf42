#include "node/model_ref.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>
#include <vector>

#if defined(__APPLE__)
#include <mach-o/dyld.h>
#endif

namespace brigade::node {
namespace {

namespace fs = std::filesystem;
using model::errc;
using model::make_error;

std::optional<std::string> env_var(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

fs::path executable_path() {
    std::error_code ec;
#if defined(__APPLE__)
    std::uint32_t size = 0;
    _NSGetExecutablePath(nullptr, &size);
    std::string buf(size, '\0');
    if (_NSGetExecutablePath(buf.data(), &size) != 0) return {};
    fs::path p = fs::canonical(fs::path(buf.c_str()), ec);
#else
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
#endif
    return ec ? fs::path{} : p;
}

bool is_model_dir(const fs::path& dir) {
    std::error_code ec;
    return fs::is_directory(dir, ec) && fs::is_regular_file(dir / "config.json", ec);
}

// Where the demo model may sit relative to the executable, in order:
//   <build>/node/brigade           → <source>/model/demo  (build dir inside the source tree)
//   <prefix>/bin/brigade           → <prefix>/share/brigade/demo  (installed)
//   <build>/brigade                → <source>/model/demo  (a flat build dir)
std::vector<fs::path> demo_candidates(const fs::path& executable) {
    if (executable.empty()) return {};
    const fs::path dir = executable.parent_path();
    return {dir / ".." / ".." / "model" / "demo", dir / ".." / "share" / "brigade" / "demo",
            dir / ".." / "model" / "demo"};
}

fs::path tidy(const fs::path& p) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(p, ec);
    return ec ? p.lexically_normal() : c;
}

model::Result<ResolvedModel> resolve_demo(const ModelRefEnvironment& env) {
    if (env.brigade_demo_model) {
        // An explicit setting that is wrong is an error, not a reason to look elsewhere.
        const fs::path dir = *env.brigade_demo_model;
        if (!is_model_dir(dir)) {
            return make_error(errc::io_error, "BRIGADE_DEMO_MODEL=" + dir.string() +
                                                  " is not a model directory (no config.json)");
        }
        return ResolvedModel{tidy(dir), ModelSource::kDemo, "BRIGADE_DEMO_MODEL"};
    }
    std::string looked;
    for (const auto& c : demo_candidates(env.executable)) {
        if (is_model_dir(c)) return ResolvedModel{tidy(c), ModelSource::kDemo, "demo"};
        looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
    }
    return make_error(
        errc::io_error,
        "no --model given and the bundled demo model was not found (looked in: " +
            (looked.empty() ? std::string("nowhere, the executable's path is unknown") : looked) +
            "); pass --model DIR or set BRIGADE_DEMO_MODEL");
}

bool is_hub_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

// `org/name` with Hub-legal characters, neither part empty or "."/"..".
bool looks_like_hub_repo(const std::string& org, const std::string& name) {
    for (const auto* part : {&org, &name}) {
        if (part->empty() || *part == "." || *part == "..") return false;
        for (char c : *part) {
            if (!is_hub_name_char(c)) return false;
        }
    }
    return true;
}

std::string read_first_line(const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\n')) {
        line.pop_back();
    }
    return line;
}

model::Result<ResolvedModel> resolve_hub(const std::string& ref, const std::string& org,
                                         const std::string& name, const std::string& rev,
                                         const ModelRefEnvironment& env) {
    const auto hub = hub_cache_dir(env);
    if (!hub) {
        return make_error(errc::io_error,
                          "'" + ref +
                              "' is not a directory, and no Hugging Face cache "
                              "is known (HOME, HF_HOME and HF_HUB_CACHE are unset)");
    }
    const fs::path repo = *hub / ("models--" + org + "--" + name);
    std::error_code ec;
    if (!fs::is_directory(repo, ec)) {
        return make_error(errc::io_error, "'" + ref + "' is neither a local directory nor in the " +
                                              "Hugging Face cache (no " + repo.string() +
                                              "); download it first, e.g. `hf download " + org +
                                              "/" + name + "`");
    }
    std::string commit;
    const fs::path ref_file = repo / "refs" / rev;
    if (fs::is_regular_file(ref_file, ec)) {
        commit = read_first_line(ref_file);
    } else if (fs::is_directory(repo / "snapshots" / rev, ec)) {
        commit = rev;  // a commit hash given directly
    } else if (rev == "main") {
        // No refs/main (e.g. fetched by commit only): accept a single snapshot.
        std::vector<std::string> snapshots;
        for (const auto& e : fs::directory_iterator(repo / "snapshots", ec)) {
            if (e.is_directory(ec)) snapshots.push_back(e.path().filename().string());
        }
        if (snapshots.size() != 1) {
            return make_error(errc::io_error, repo.string() + " has no refs/main and " +
                                                  std::to_string(snapshots.size()) +
                                                  " snapshots; name one as " + org + "/" + name +
                                                  "@<commit>");
        }
        commit = snapshots.front();
    } else {
        return make_error(errc::io_error, "revision '" + rev + "' of " + org + "/" + name +
                                              " is not in the cache (no " + ref_file.string() +
                                              " and no snapshot of that name)");
    }
    const fs::path dir = repo / "snapshots" / commit;
    if (commit.empty() || !is_model_dir(dir)) {
        return make_error(errc::io_error, "the cached snapshot " + dir.string() + " of " + org +
                                              "/" + name +
                                              " has no config.json (incomplete download?)");
    }
    return ResolvedModel{dir, ModelSource::kHubCache, ref};
}

}  // namespace

ModelRefEnvironment ModelRefEnvironment::from_process() {
    ModelRefEnvironment env;
    env.brigade_demo_model = env_var("BRIGADE_DEMO_MODEL");
    env.hf_hub_cache = env_var("HF_HUB_CACHE");
    if (!env.hf_hub_cache) env.hf_hub_cache = env_var("HUGGINGFACE_HUB_CACHE");  // older name
    env.hf_home = env_var("HF_HOME");
    env.xdg_cache_home = env_var("XDG_CACHE_HOME");
    env.home = env_var("HOME");
    env.executable = executable_path();
    return env;
}

std::optional<fs::path> hub_cache_dir(const ModelRefEnvironment& env) {
    if (env.hf_hub_cache) return fs::path(*env.hf_hub_cache);
    if (env.hf_home) return fs::path(*env.hf_home) / "hub";
    if (env.xdg_cache_home) return fs::path(*env.xdg_cache_home) / "huggingface" / "hub";
    if (env.home) return fs::path(*env.home) / ".cache" / "huggingface" / "hub";
    return std::nullopt;
}

model::Result<ResolvedModel> resolve_model_ref(const std::string& model_ref,
                                               const ModelRefEnvironment& env) {
    if (model_ref.empty()) return resolve_demo(env);

    std::error_code ec;
    const fs::path as_path(model_ref);
    if (fs::is_directory(as_path, ec)) {
        if (!is_model_dir(as_path)) {
            return make_error(errc::io_error, "'" + model_ref +
                                                  "' is a directory but has no config.json, so "
                                                  "it is not a model directory");
        }
        return ResolvedModel{as_path, ModelSource::kLocalDirectory, model_ref};
    }
    if (fs::exists(as_path, ec)) {
        return make_error(errc::io_error,
                          "'" + model_ref + "' is a file; --model takes a model directory");
    }

    // `org/name` or `org/name@rev`.
    std::string repo = model_ref;
    std::string rev = "main";
    if (const auto at = repo.find('@'); at != std::string::npos) {
        rev = repo.substr(at + 1);
        repo.resize(at);
    }
    const auto slash = repo.find('/');
    if (slash != std::string::npos && repo.find('/', slash + 1) == std::string::npos) {
        const std::string org = repo.substr(0, slash);
        const std::string name = repo.substr(slash + 1);
        if (looks_like_hub_repo(org, name) && !rev.empty() && rev.find('/') == std::string::npos &&
            rev != "." && rev != "..") {
            return resolve_hub(model_ref, org, name, rev, env);
        }
    }
    return make_error(errc::io_error, "model '" + model_ref +
                                          "' not found: not a directory, and not a Hugging Face "
                                          "repo name of the form org/name[@revision]");
}

std::string model_choice_note(const ResolvedModel& model) {
    switch (model.source) {
        case ModelSource::kDemo:
            return "using the bundled demo model at " + model.dir.string() + " (no --model given" +
                   (model.name == "demo" ? std::string(")") : "; set by " + model.name + ")");
        case ModelSource::kHubCache:
            return "using " + model.name + " from the Hugging Face cache: " + model.dir.string();
        case ModelSource::kLocalDirectory:
            break;
    }
    return {};
}

model::Result<ResolvedModel> resolve_model_for_command(const std::string& model_ref,
                                                       const std::string& command) {
    auto resolved = resolve_model_ref(model_ref, ModelRefEnvironment::from_process());
    if (resolved) {
        const std::string note = model_choice_note(*resolved);
        if (!note.empty()) std::fprintf(stderr, "brigade %s: %s\n", command.c_str(), note.c_str());
    }
    return resolved;
}

}  // namespace brigade::node
