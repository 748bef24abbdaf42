#include "model/cpu/cpu_count.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/test_support.hpp"

namespace brigade::model::cpu {
namespace {

void write(const std::filesystem::path& p, const std::string& text) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

TEST(CpuCount, CgroupQuotasInWholeCpus) {
    EXPECT_EQ(cpus_of_cgroup2_max("400000 100000\n"), 4);
    EXPECT_EQ(cpus_of_cgroup2_max("150000 100000"), 1);  // 1.5 CPUs of time: one thread
    EXPECT_EQ(cpus_of_cgroup2_max("50000 100000\n"), 1);
    EXPECT_EQ(cpus_of_cgroup2_max("max 100000\n"), std::nullopt);
    EXPECT_EQ(cpus_of_cgroup2_max(""), std::nullopt);
    EXPECT_EQ(cpus_of_cgroup2_max("400000"), std::nullopt);
    EXPECT_EQ(cpus_of_cgroup2_max("4x 100000"), std::nullopt);
    EXPECT_EQ(cpus_of_cgroup1_quota("800000\n", "100000\n"), 8);
    EXPECT_EQ(cpus_of_cgroup1_quota("-1\n", "100000\n"), std::nullopt);
    EXPECT_EQ(cpus_of_cgroup1_quota("800000\n", "0\n"), std::nullopt);
}

// cgroup v2: the tightest cpu.max of the process's group and its ancestors.
TEST(CpuCount, CgroupV2LimitOfTheGroupAndItsAncestors) {
    test::TempDir root;
    write(root.path() / "cpu.max", "max 100000\n");
    write(root.path() / "a" / "cpu.max", "800000 100000\n");
    write(root.path() / "a" / "b" / "cpu.max", "max 100000\n");
    EXPECT_EQ(cgroup_cpu_limit(root.path(), "0::/a/b\n"), 8);
    write(root.path() / "a" / "b" / "cpu.max", "200000 100000\n");
    EXPECT_EQ(cgroup_cpu_limit(root.path(), "0::/a/b\n"), 2);
    EXPECT_EQ(cgroup_cpu_limit(root.path(), "0::/\n"), std::nullopt);
    EXPECT_EQ(cgroup_cpu_limit(root.path(), "0::/elsewhere\n"), std::nullopt);
}

// cgroup v1: the cpu controller's hierarchy (here mounted as cpu,cpuacct), other controllers'
// lines ignored, malformed lines too.
TEST(CpuCount, CgroupV1QuotaOfTheCpuController) {
    test::TempDir root;
    const auto group = root.path() / "cpu,cpuacct" / "docker" / "x";
    write(group / "cpu.cfs_quota_us", "300000\n");
    write(group / "cpu.cfs_period_us", "100000\n");
    write(root.path() / "memory" / "docker" / "x" / "cpu.cfs_quota_us", "100000\n");
    const std::string self =
        "5:memory:/docker/x\nnot a line\n4:cpu,cpuacct:/docker/x\n1:name=systemd:/\n";
    EXPECT_EQ(cgroup_cpu_limit(root.path(), self), 3);
    write(group / "cpu.cfs_quota_us", "-1\n");
    EXPECT_EQ(cgroup_cpu_limit(root.path(), self), std::nullopt);
    EXPECT_EQ(cgroup_cpu_limit(root.path(), ""), std::nullopt);
}

TEST(CpuCount, UsableCpusAreAtLeastOne) { EXPECT_GE(usable_cpus(), 1); }

}  // namespace
}  // namespace brigade::model::cpu
