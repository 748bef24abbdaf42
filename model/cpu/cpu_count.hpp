#pragma once
// How many CPUs this process may use: the fewer of its affinity mask (a container's cpuset,
// taskset) and its cgroup's CPU quota (a container started with --cpus=4 sees every CPU of
// the host, and 64 threads on 4 CPUs' worth of time wait for each other in every fork-join).

#include <filesystem>
#include <optional>
#include <string_view>

namespace brigade::model::cpu {

// CPUs this process may run on (at least 1). Linux: affinity mask and cgroup quota; elsewhere
// the hardware threads.
int usable_cpus();

// Whole CPUs of a cgroup v2 `cpu.max` ("400000 100000": 4; "max 100000": no limit). A
// fraction rounds down, to at least 1: 1.5 CPUs of time make one thread that runs, not two
// that take turns.
std::optional<int> cpus_of_cgroup2_max(std::string_view cpu_max);
// The same from cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: no limit).
std::optional<int> cpus_of_cgroup1_quota(std::string_view quota_us, std::string_view period_us);

// The tightest CPU quota on this process's cgroup and its ancestors: `proc_self_cgroup` is the
// text of /proc/self/cgroup, `root` the cgroup mount (/sys/fs/cgroup; v2 unified or v1
// hierarchies below it). No limit found: nullopt.
std::optional<int> cgroup_cpu_limit(const std::filesystem::path& root,
                                    std::string_view proc_self_cgroup);

}  // namespace brigade::model::cpu
