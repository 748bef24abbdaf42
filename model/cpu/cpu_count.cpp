#include "model/cpu/cpu_count.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace brigade::model::cpu {
namespace {

std::optional<std::int64_t> parse_int(std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
}

std::optional<int> whole_cpus(std::int64_t quota, std::int64_t period) {
    if (quota <= 0 || period <= 0) return std::nullopt;
    return static_cast<int>(std::max<std::int64_t>(1, quota / period));
}

std::optional<std::string> read_file(const std::filesystem::path& p) {
    std::ifstream f(p);
    if (!f) return std::nullopt;
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

std::optional<int> tighter(std::optional<int> a, std::optional<int> b) {
    if (!a) return b;
    if (!b) return a;
    return std::min(*a, *b);
}

// `dir` and each of its ancestors up to `top`, deepest first.
std::vector<std::filesystem::path> self_and_ancestors(const std::filesystem::path& top,
                                                      std::string_view relative) {
    std::vector<std::filesystem::path> out;
    std::filesystem::path rel = std::filesystem::path(relative).relative_path();
    for (;;) {
        out.push_back(top / rel);
        if (rel.empty()) break;
        rel = rel.parent_path();
    }
    return out;
}

}  // namespace

std::optional<int> cpus_of_cgroup2_max(std::string_view cpu_max) {
    const auto space = cpu_max.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    const auto quota = parse_int(cpu_max.substr(0, space));  // "max": none
    const auto period = parse_int(cpu_max.substr(space + 1));
    if (!quota || !period) return std::nullopt;
    return whole_cpus(*quota, *period);
}

std::optional<int> cpus_of_cgroup1_quota(std::string_view quota_us, std::string_view period_us) {
    const auto quota = parse_int(quota_us);
    const auto period = parse_int(period_us);
    if (!quota || !period) return std::nullopt;
    return whole_cpus(*quota, *period);
}

std::optional<int> cgroup_cpu_limit(const std::filesystem::path& root,
                                    std::string_view proc_self_cgroup) {
    std::optional<int> limit;
    std::istringstream lines{std::string(proc_self_cgroup)};
    std::string line;
    while (std::getline(lines, line)) {
        // "hierarchy-id:controllers:path"; v2 is "0::path".
        const auto c1 = line.find(':');
        const auto c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
        if (c2 == std::string::npos) continue;
        const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
        const std::string_view path = std::string_view(line).substr(c2 + 1);
        if (controllers.empty()) {
            for (const auto& dir : self_and_ancestors(root, path)) {
                if (const auto text = read_file(dir / "cpu.max")) {
                    limit = tighter(limit, cpus_of_cgroup2_max(*text));
                }
            }
            continue;
        }
        std::istringstream names(controllers);
        std::string name;
        bool has_cpu = false;
        while (std::getline(names, name, ',')) has_cpu = has_cpu || name == "cpu";
        if (!has_cpu) continue;
        // v1: the cpu controller's own hierarchy, mounted as cpu or cpu,cpuacct.
        for (const char* mount : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
            for (const auto& dir : self_and_ancestors(root / mount, path)) {
                const auto quota = read_file(dir / "cpu.cfs_quota_us");
                const auto period = read_file(dir / "cpu.cfs_period_us");
                if (quota && period) limit = tighter(limit, cpus_of_cgroup1_quota(*quota, *period));
            }
        }
    }
    return limit;
}

int usable_cpus() {
    int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    if (const auto self = read_file("/proc/self/cgroup")) {
        if (const auto quota = cgroup_cpu_limit("/sys/fs/cgroup", *self)) n = std::min(n, *quota);
    }
#endif
    return n;
}

}  // namespace brigade::model::cpu
