#pragma once
// A persistent pool of compute threads for the CPU backend (house guide §3: kernels run on a
// compute pool, never on an I/O thread).
//
// `parallel_for(n_tasks, f)` runs f(task, thread) for every task in [0, n_tasks) on the pool,
// the caller included, and returns when all tasks are done. Nothing is allocated per call: the
// job is a function pointer plus a context pointer.
//
// Why it is built this way: a decode step issues a hundred or more parallel regions a few
// microseconds apart, so the cost of one region is paid per op. A single shared task counter
// made every claim a compare-and-swap on one cache line that all threads fight over (measured
// on a 16-core VM: 3-4 µs per empty region, 6-8 µs with 4 tasks per thread). Instead the
// tasks are cut into one contiguous block per thread ("lane"); a thread claims tasks from its
// own lane first (a cache line only it touches while it has work), then steals from the
// others', so a thread that is asleep or preempted (an oversubscribed machine) holds nothing
// up: the caller waits for tasks, not for threads. Each thread reports its completed tasks once
// per region, on its own cache line, and the caller sums them.
//
// Idle workers spin for a short while before sleeping on a condition variable: waking a
// sleeping thread costs tens of microseconds, but spinning for long would steal cores from
// other processes.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace brigade::model::cpu {

class ThreadPool {
public:
    // `n_threads` counts the caller: n_threads - 1 workers are started. 0 = every CPU the
    // process may run on (usable_cpus).
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Parallel regions so far that handed tasks to the workers (a job of more than one task
    // on a pool of more than one thread; smaller ones run inline): the fork-joins a decode
    // step pays for. Read by tests and benchmarks.
    std::uint64_t n_dispatches() const { return n_dispatches_.load(std::memory_order_relaxed); }

    // Calls f(std::int64_t task, int thread) for each task; `thread` is in [0, size()) and no
    // two calls with the same `thread` run at once (per-thread scratch is safe).
    // Not reentrant: f must not call parallel_for on the same pool.
    template <class F>
    void parallel_for(std::int64_t n_tasks, F&& f) {
        using Fn = std::remove_reference_t<F>;
        auto trampoline = [](void* ctx, std::int64_t task, int thread) {
            (*static_cast<Fn*>(ctx))(task, thread);
        };
        for (std::int64_t first = 0; first < n_tasks; first += kMaxTasksPerJob) {
            const std::int64_t count = std::min<std::int64_t>(kMaxTasksPerJob, n_tasks - first);
            run(first, count, trampoline, const_cast<void*>(static_cast<const void*>(&f)));
        }
    }

private:
    using TaskFn = void (*)(void* ctx, std::int64_t task, int thread);
    // A job word packs generation (40 bits) | task count (24). Lane claim words pack
    // generation | tasks taken from the lane, done words generation | tasks completed: a word
    // of an older generation reads as "nothing yet" for the current job. Generations are only
    // compared for equality, so wrapping is harmless unless a lane sits untouched for exactly
    // 2^40 jobs.
    static constexpr int kCountBits = 24;
    static constexpr std::int64_t kMaxTasksPerJob = (std::int64_t{1} << kCountBits) - 1;

    struct alignas(64) Lane {
        std::atomic<std::uint64_t> claimed{0};
    };
    struct alignas(64) Done {
        std::atomic<std::uint64_t> word{0};
    };

    void run(std::int64_t first, std::int64_t n_tasks, TaskFn fn, void* ctx);
    void worker_loop(int thread);
    // Runs tasks of job word `job` until none is left to claim; returns how many it ran.
    // Workers report their counts in done_ (thread 0, the caller, counts its own).
    std::uint64_t work_on(std::uint64_t job, int thread);
    void report_done(std::uint64_t job, int thread, std::uint64_t n_ran);
    // Whether every task of `job` is counted: `mine` on the caller plus the workers' reports.
    bool all_done(std::uint64_t job, std::uint64_t mine) const;
    // Claims the next task of lane `lane` for job `job`; -1 when the lane has none left or
    // the job is over.
    std::int64_t claim(std::uint64_t job, int lane);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    // Workers blocked (or about to block) on wake_; changed under mutex_, read without it.
    std::atomic<int> n_sleeping_{0};
    int n_threads_ = 1;

    // The current job; written by the caller before the job word is published and read by a
    // worker only after it claimed a task of that job (which cannot complete before the task).
    TaskFn fn_ = nullptr;
    void* ctx_ = nullptr;
    std::int64_t first_task_ = 0;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> n_dispatches_{0};
    std::vector<Lane> lanes_;  // [size()]
    std::vector<Done> done_;   // [size()]
    alignas(64) std::atomic<std::uint64_t> job_{0};
};

}  // namespace brigade::model::cpu
