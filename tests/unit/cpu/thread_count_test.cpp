#include "model/cpu/thread_count.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/thread_pool.hpp"
#include "tests/support/test_support.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

namespace brigade::model::cpu {
namespace {

TEST(ThreadCount, FewerThreadsOnlyWhereTheyWinClearly) {
    // The lent 64-vCPU VM (session 36): 64 threads 10274 regions/s, 48 29906, 32 46124.
    EXPECT_EQ(pick_thread_count({{64, 10274}, {48, 29906}, {32, 46124}}), 32);
    EXPECT_EQ(pick_thread_count({{64, 10274}, {48, 46124}, {32, 29906}}), 48);
    // A machine that runs every thread: the fewer are slower, or faster within the margin.
    EXPECT_EQ(pick_thread_count({{64, 90000}, {48, 70000}, {32, 50000}}), 64);
    EXPECT_EQ(pick_thread_count({{64, 40000}, {48, 49000}, {32, 45000}}), 64);
    EXPECT_EQ(pick_thread_count({{64, 40000}, {48, 49000}, {32, 50001}}), 32);
    EXPECT_EQ(pick_thread_count({{40, 1000}}), 40);
    EXPECT_EQ(pick_thread_count({}), 1);
}

TEST(ThreadCount, EveryThreadWithoutMeasuringBelowTheProbeThreshold) {
    for (int n : {1, 2, 16, kThreadCountProbeFrom - 1}) {
        const ThreadCountChoice choice = choose_thread_count(n);
        EXPECT_EQ(choice.threads, n);
        EXPECT_TRUE(choice.samples.empty()) << n;
    }
}

// The probe's measurements, whatever the CPU count (benches force it below the threshold):
// all, three quarters and half, never a pool of 0 (which would mean every CPU).
TEST(ThreadCount, TheProbeMeasuresEveryCandidate) {
    for (int n : {1, 2}) {
        const auto samples = measure_thread_counts(n);
        ASSERT_EQ(samples.size(), 3u) << n;
        EXPECT_EQ(samples[0].threads, n);
        EXPECT_EQ(samples[1].threads, std::max(1, n * 3 / 4));
        EXPECT_EQ(samples[2].threads, std::max(1, n / 2));
        for (const auto& s : samples) EXPECT_GT(s.regions_per_s, 0.0) << n;
    }
}

TEST(ThreadCount, TheProbeMeasuresRegions) {
    const double rate = measure_region_rate(2, 200, 8, 1000);
    // 200 regions of 8 tasks of ~1 µs on 2 threads: well under a second on any machine.
    EXPECT_GT(rate, 100.0);
}

TEST(ThreadCount, DescribesTheChoice) {
    EXPECT_EQ(describe({8, {}}, 8), "8 of 8 CPUs");
    EXPECT_EQ(describe({32, {{64, 10274}, {48, 29906}, {32, 46124}}}, 64),
              "32 of 64 CPUs: fork-joins completed faster on fewer threads (64 threads 10274/s, "
              "48 threads 29906/s, 32 threads 46124/s); --threads N overrides");
    EXPECT_EQ(describe({64, {{64, 90000}, {48, 70000}, {32, 50000}}}, 64),
              "64 of 64 CPUs: fewer threads were not 25% faster at fork-joins (64 threads 90000/s, "
              "48 threads 70000/s, 32 threads 50000/s); --threads N overrides");
}

TEST(ThreadCount, WarnsOfMoreThreadsThanCpus) {
    EXPECT_EQ(oversubscription_warning(8, 8), "");
    EXPECT_EQ(oversubscription_warning(0, 8), "");
    EXPECT_EQ(oversubscription_warning(64, 8),
              "64 compute threads on 8 usable CPUs: threads beyond the CPUs take turns and every "
              "parallel step waits for the last of them; --threads 0 chooses");
}

#if defined(__linux__)
// A process pinned to fewer CPUs than the machine has (a container's cpuset, taskset) counts
// only those: 64 threads on 8 CPUs would run like the oversubscribed VM above.
TEST(ThreadCount, UsableCpusFollowTheAffinityMask) {
    cpu_set_t saved;
    ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
    int expected = CPU_COUNT(&saved);
    if (const auto quota =
            cgroup_cpu_limit("/sys/fs/cgroup", test::read_file("/proc/self/cgroup"))) {
        expected = std::min(expected, *quota);
    }
    EXPECT_EQ(usable_cpus(), expected);
    int first = 0;
    while (!CPU_ISSET(first, &saved)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    const int pinned = usable_cpus();
    // A pool and the thread-count choice take the same count when left to choose.
    const int pool_threads = ThreadPool(0).size();
    const int chosen = choose_thread_count(usable_cpus()).threads;
    ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
    EXPECT_EQ(pinned, 1);
    EXPECT_EQ(pool_threads, 1);
    EXPECT_EQ(chosen, 1);
}
#endif

TEST(ThreadCount, AThreadCountGivenIsTakenAndNoneTheProcesssChoice) {
    EXPECT_EQ(CpuBackend(BackendOptions{3}, CpuTuning{}).compute_threads(), 3);
    const ThreadCountChoice& choice = default_thread_count();
    EXPECT_EQ(&choice, &default_thread_count());  // measured once
    EXPECT_EQ(CpuBackend(BackendOptions{0}, CpuTuning{}).compute_threads(), choice.threads);
    EXPECT_GE(choice.threads, 1);
    EXPECT_LE(choice.threads, usable_cpus());
}

}  // namespace
}  // namespace brigade::model::cpu
