#include "model/cpu/thread_pool.hpp"

#include <algorithm>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif

namespace brigade::model::cpu {
namespace {

// About 50-100 µs of polling before a worker sleeps: longer than the gap between two kernels
// of one decode step, far shorter than the gap between two requests.
constexpr int kSpinIterations = 2000;

constexpr int kIndexBits = 22;
constexpr std::uint64_t kFieldMask = (std::uint64_t{1} << kIndexBits) - 1;
constexpr int kGenShift = 2 * kIndexBits;

std::uint64_t gen_of(std::uint64_t job) { return job >> kGenShift; }
std::uint64_t count_of(std::uint64_t job) { return (job >> kIndexBits) & kFieldMask; }
std::uint64_t index_of(std::uint64_t job) { return job & kFieldMask; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) {
        n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    workers_.reserve(static_cast<std::size_t>(n_threads - 1));
    for (int t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::work_on(std::uint64_t gen, int thread) {
    std::uint64_t job = job_.load(std::memory_order_acquire);
    for (;;) {
        if (gen_of(job) != gen || index_of(job) >= count_of(job)) return;
        if (!job_.compare_exchange_weak(job, job + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
            continue;  // `job` was reloaded
        }
        fn_(ctx_, first_task_ + static_cast<std::int64_t>(index_of(job)), thread);
        n_done_.fetch_add(1, std::memory_order_release);
        job = job_.load(std::memory_order_acquire);
    }
}

void ThreadPool::run(std::int64_t first, std::int64_t n_tasks, TaskFn fn, void* ctx) {
    if (n_tasks <= 0) return;
    if (workers_.empty() || n_tasks == 1) {
        for (std::int64_t task = 0; task < n_tasks; ++task) fn(ctx, first + task, 0);
        return;
    }
    n_dispatches_.fetch_add(1, std::memory_order_relaxed);
    // All tasks of the previous job completed before it returned, so no worker reads these.
    fn_ = fn;
    ctx_ = ctx;
    first_task_ = first;
    n_done_.store(0, std::memory_order_relaxed);
    const std::uint64_t gen = (gen_of(job_.load(std::memory_order_relaxed)) + 1) & kFieldMask;
    job_.store((gen << kGenShift) | (static_cast<std::uint64_t>(n_tasks) << kIndexBits),
               std::memory_order_release);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (n_sleeping_ > 0) wake_.notify_all();
    }
    work_on(gen, 0);
    for (int spins = 0; n_done_.load(std::memory_order_acquire) != n_tasks; ++spins) {
        if (spins < kSpinIterations) {
            cpu_relax();
        } else {
            std::this_thread::yield();
        }
    }
}

void ThreadPool::worker_loop(int thread) {
    std::uint64_t seen = 0;
    for (;;) {
        auto is_new = [&] {
            return gen_of(job_.load(std::memory_order_acquire)) != seen ||
                   stop_.load(std::memory_order_acquire);
        };
        for (int spins = 0; !is_new() && spins < kSpinIterations; ++spins) cpu_relax();
        if (!is_new()) {
            std::unique_lock<std::mutex> lock(mutex_);
            ++n_sleeping_;
            wake_.wait(lock, is_new);
            --n_sleeping_;
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = gen_of(job_.load(std::memory_order_acquire));
        work_on(seen, thread);
    }
}

}  // namespace brigade::model::cpu
