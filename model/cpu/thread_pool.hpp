#pragma once
// A persistent pool of compute threads for the CPU backend (house guide §3: kernels run on a
// compute pool, never on an I/O thread).
//
// `parallel_for(n_tasks, f)` runs f(task, thread) for every task in [0, n_tasks) on the pool,
// the caller included, and returns when all tasks are done. Tasks are claimed one at a time
// from a shared counter, so threads that finish early take more work and all finish together.
// Nothing is allocated per call: the job is a function pointer plus a context pointer.
//
// The caller waits for tasks, not for threads: a worker that is asleep or preempted (an
// oversubscribed machine) simply claims nothing, and the others, the caller included, do its
// share. Idle workers spin for a short while before sleeping on a condition variable: a decode
// step issues hundreds of parallel regions microseconds apart, and waking a sleeping thread
// costs tens of microseconds, but spinning for long would steal cores from other processes.

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
    // `n_threads` counts the caller: n_threads - 1 workers are started. 0 = all hardware threads.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }
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
    // The job word packs generation (20 bits) | task count (22) | next task (22), so that a
    // claim is one compare-and-swap that cannot take a task of a newer job by mistake.
    static constexpr int kIndexBits = 22;
    static constexpr std::int64_t kMaxTasksPerJob = (std::int64_t{1} << kIndexBits) - 1;

    void run(std::int64_t first, std::int64_t n_tasks, TaskFn fn, void* ctx);
    void worker_loop(int thread);
    // Runs tasks of generation `gen` until none is left to claim.
    void work_on(std::uint64_t gen, int thread);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    int n_sleeping_ = 0;  // guarded by mutex_

    // The current job; written by the caller before the job word is published (release) and
    // read by a worker only after it claimed a task of that job.
    TaskFn fn_ = nullptr;
    void* ctx_ = nullptr;
    std::int64_t first_task_ = 0;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> job_{0};
    std::atomic<std::int64_t> n_done_{0};
    std::atomic<std::uint64_t> n_dispatches_{0};
};

}  // namespace brigade::model::cpu
