#include "model/cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace brigade::model::cpu {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnceAndReportsValidThreadIndices) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        ASSERT_EQ(pool.size(), threads);
        for (std::int64_t n_tasks : {0, 1, 2, 7, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n_tasks));
            std::atomic<int> bad_thread{0};
            pool.parallel_for(n_tasks, [&](std::int64_t task, int thread) {
                hits[static_cast<std::size_t>(task)].fetch_add(1);
                if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
            });
            for (auto& h : hits) ASSERT_EQ(h.load(), 1);
            EXPECT_EQ(bad_thread.load(), 0);
        }
    }
}

TEST(ThreadPool, ManyBackToBackRegionsAndSleepingWorkersWakeUp) {
    ThreadPool pool(3);
    std::atomic<std::int64_t> sum{0};
    for (int round = 0; round < 2000; ++round) {
        pool.parallel_for(4, [&](std::int64_t task, int) { sum.fetch_add(task + 1); });
        if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(sum.load(), 2000 * 10);
}

// Tasks are cut into one lane per thread and late threads steal: with more threads than cores
// (some preempted mid-claim) and task counts below, at and above the thread count, every task
// of every region must still run exactly once, and no region may see a task of another.
TEST(ThreadPool, EveryTaskRunsOnceWhenThreadsAreOversubscribedAndStealing) {
    ThreadPool pool(7);
    std::vector<std::atomic<int>> hits(64);
    for (int round = 0; round < 20000; ++round) {
        const std::int64_t n_tasks = 2 + round % 61;
        for (std::int64_t t = 0; t < n_tasks; ++t) hits[static_cast<std::size_t>(t)].store(0);
        std::atomic<int> out_of_range{0};
        pool.parallel_for(n_tasks, [&](std::int64_t task, int) {
            if (task < 0 || task >= n_tasks) {
                out_of_range.fetch_add(1);
                return;
            }
            hits[static_cast<std::size_t>(task)].fetch_add(1);
        });
        ASSERT_EQ(out_of_range.load(), 0) << "round " << round;
        for (std::int64_t t = 0; t < n_tasks; ++t) {
            ASSERT_EQ(hits[static_cast<std::size_t>(t)].load(), 1)
                << "round " << round << " task " << t << " of " << n_tasks;
        }
    }
}

TEST(ThreadPool, ZeroMeansAllHardwareThreads) {
    ThreadPool pool(0);
    EXPECT_GE(pool.size(), 1);
}

}  // namespace
}  // namespace brigade::model::cpu
