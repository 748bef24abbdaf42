// Where one parallel region of the CPU backend's thread pool spends its time (issue 8): a decode
// step of a small model pays a hundred or more regions, a few microseconds apart, so the pool's
// own latency is part of every op. kernels_bench times an empty region as a whole; this bench
// stamps each step of it with the time-stamp counter:
//
//   wake      publish -> each worker's first task starts (median worker, slowest worker)
//   tail      the last task's end -> the caller returns from parallel_for
//   region    publish -> return
//
// for one task per thread, with tasks that do nothing or spin for a fixed time, and with the
// caller idle for a while between regions (as the engine's small ops between two matmuls)
// or not at all; or idle for 50 µs to 2 ms (a sampler's serial pass, a pipeline stage waiting
// for its input), past the workers' spin, so that the region wakes sleeping threads. Medians and
// 90th percentiles over many regions, in ns.
//
// Next to the pool, a floor: the least a fork-join costs on this machine, threads that spin on
// one job word and answer on one word each, with no task claims, no stealing and no sleeping
// (so no protection against a preempted thread). The pool's distance from it is what its
// protocol costs.
//
// Usage: pool_bench [--threads N] [--regions N] [--json FILE]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "model/cpu/thread_count.hpp"
#include "model/cpu/thread_pool.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <x86intrin.h>
#endif

namespace {

using brigade::model::cpu::ThreadPool;
using Clock = std::chrono::steady_clock;

// Ticks of a clock every core reads alike: the TSC on x86 (invariant on every CPU this runs
// on), the steady clock elsewhere (coarser; the figures are then rougher).
std::uint64_t ticks() {
#if defined(__x86_64__) || defined(_M_X64)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

// Nanoseconds per tick, measured against the steady clock over 50 ms.
double ns_per_tick() {
    const auto c0 = Clock::now();
    const std::uint64_t t0 = ticks();
    while (Clock::now() - c0 < std::chrono::milliseconds(50)) {
    }
    const std::uint64_t t1 = ticks();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - c0).count();
    return ns / static_cast<double>(t1 - t0);
}

void spin_ticks(std::uint64_t n) {
    const std::uint64_t end = ticks() + n;
    while (ticks() < end) {
    }
}

// The floor's threads: thread t runs task t of every job; the caller is thread 0.
class FloorPool {
public:
    explicit FloorPool(int n) : n_(n), done_(static_cast<std::size_t>(n)) {
        for (int t = 1; t < n; ++t) workers_.emplace_back([this, t] { loop(t); });
    }
    ~FloorPool() {
        job_.store(kStop, std::memory_order_release);
        for (auto& w : workers_) w.join();
    }
    template <class F>
    void run(F& f) {
        fn_ = [](void* ctx, int t) { (*static_cast<F*>(ctx))(t); };
        ctx_ = &f;
        const std::uint64_t job = ++last_job_;
        job_.store(job, std::memory_order_release);
        f(0);
        for (int t = 1; t < n_; ++t) {
            while (done_[static_cast<std::size_t>(t)].word.load(std::memory_order_acquire) != job) {
                relax();
            }
        }
    }

private:
    static constexpr std::uint64_t kStop = ~std::uint64_t{0};
    struct alignas(64) Word {
        std::atomic<std::uint64_t> word{0};
    };
    static void relax() {
#if defined(__x86_64__) || defined(_M_X64)
        _mm_pause();
#endif
    }
    void loop(int t) {
        std::uint64_t seen = 0;
        for (;;) {
            std::uint64_t job;
            while ((job = job_.load(std::memory_order_acquire)) == seen) relax();
            if (job == kStop) return;
            seen = job;
            fn_(ctx_, t);
            done_[static_cast<std::size_t>(t)].word.store(job, std::memory_order_release);
        }
    }
    int n_;
    std::uint64_t last_job_ = 0;
    void (*fn_)(void*, int) = nullptr;
    void* ctx_ = nullptr;
    alignas(64) std::atomic<std::uint64_t> job_{0};
    std::vector<Word> done_;
    std::vector<std::thread> workers_;
};

// What one task saw: when it ran and on which thread (its own unless another stole it).
struct alignas(64) Stamp {
    std::uint64_t start = 0, end = 0;
    int thread = 0;
};

struct Percentiles {
    double p50 = 0, p90 = 0;
};

Percentiles percentiles(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return {};
    return {v[v.size() / 2], v[v.size() * 9 / 10]};
}

struct Case {
    double task_ns;  // each task spins this long
    double gap_ns;   // the caller spins this long between regions
};

}  // namespace

int main(int argc, char** argv) {
    int n_threads = 0;
    int n_regions = 20000;
    std::string json_path;
    bool choose = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) {
            n_threads = std::atoi(argv[++i]);
        } else if (a == "--regions" && i + 1 < argc) {
            n_regions = std::max(100, std::atoi(argv[++i]));
        } else if (a == "--choose") {
            choose = true;
        } else if (a == "--json" && i + 1 < argc) {
            json_path = argv[++i];
        } else {
            std::fprintf(
                stderr, "usage: pool_bench [--threads N] [--regions N] [--json FILE] [--choose]\n");
            return 2;
        }
    }
    const int n = n_threads > 0
                      ? n_threads
                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (choose) {
        // The backend's thread-count probe (thread_count.hpp) on n CPUs, whatever n is (the
        // backend measures only from kThreadCountProbeFrom), three times, and its decision.
        for (int round = 0; round < 3; ++round) {
            const auto t0 = Clock::now();
            const auto samples = brigade::model::cpu::measure_thread_counts(n);
            const double s = std::chrono::duration<double>(Clock::now() - t0).count();
            std::printf("probe %d (%.2f s):", round, s);
            for (const auto& sample : samples) {
                std::printf(" %d threads %.0f regions/s;", sample.threads, sample.regions_per_s);
            }
            std::printf(" would take %d\n", brigade::model::cpu::pick_thread_count(samples));
        }
        return 0;
    }
    const double ns_tick = ns_per_tick();
    std::printf("pool_bench: %d threads, %d regions a case, %.3f ns per tick\n", n, n_regions,
                ns_tick);
    std::printf("%-32s %14s %14s %14s %14s %8s\n", "case (ns, p50 / p90)", "wake median",
                "wake slowest", "tail", "region", "stolen");
    nlohmann::json out = nlohmann::json::array();
    std::vector<Stamp> stamps(static_cast<std::size_t>(n));
    // Signed: the counters of two cores may differ by a few ticks.
    auto since = [&](std::uint64_t from, std::uint64_t to) {
        return (static_cast<double>(to) - static_cast<double>(from)) * ns_tick;
    };

    // Runs every case through `region(task)`, which runs task(t) for t in [0, n) in parallel.
    auto measure = [&](const char* pool_name, auto&& region) {
        for (const Case c :
             {Case{0, 0}, Case{0, 1000}, Case{2000, 0}, Case{2000, 1000}, Case{5000, 1000},
              Case{2000, 50000}, Case{2000, 300000}, Case{2000, 2000000}}) {
            // Long gaps (a sampler's serial pass, a pipeline stage waiting for its input) pass
            // the workers' spin: the regions after them wake sleeping threads.
            const int regions = c.gap_ns > 10000
                                    ? std::max(100, n_regions / static_cast<int>(c.gap_ns / 10000))
                                    : n_regions;
            const auto task_ticks = static_cast<std::uint64_t>(c.task_ns / ns_tick);
            const auto gap_ticks = static_cast<std::uint64_t>(c.gap_ns / ns_tick);
            std::vector<double> wake_mid, wake_max, tail, region_ns;
            std::int64_t stolen = 0;
            std::vector<double> wakes;
            for (int r = -regions / 10; r < regions; ++r) {  // the first tenth warms up
                spin_ticks(gap_ticks);
                const std::uint64_t t0 = ticks();
                region([&](std::int64_t task, int thread) {
                    Stamp& s = stamps[static_cast<std::size_t>(task)];
                    s.start = ticks();
                    s.thread = thread;
                    spin_ticks(task_ticks);
                    s.end = ticks();
                });
                const std::uint64_t t1 = ticks();
                if (r < 0) continue;
                wakes.clear();
                std::uint64_t last_end = 0;
                for (int t = 0; t < n; ++t) {
                    const Stamp& s = stamps[static_cast<std::size_t>(t)];
                    last_end = std::max(last_end, s.end);
                    if (s.thread != t) ++stolen;
                    if (s.thread > 0) wakes.push_back(since(t0, s.start));
                }
                std::sort(wakes.begin(), wakes.end());
                if (!wakes.empty()) {
                    wake_mid.push_back(wakes[wakes.size() / 2]);
                    wake_max.push_back(wakes.back());
                }
                tail.push_back(since(last_end, t1));
                region_ns.push_back(since(t0, t1));
            }
            const Percentiles wm = percentiles(wake_mid), wx = percentiles(wake_max),
                              tl = percentiles(tail), rg = percentiles(region_ns);
            char name[96];
            std::snprintf(name, sizeof name, "%s: task %.0f, gap %.0f", pool_name, c.task_ns,
                          c.gap_ns);
            const double stolen_share =
                static_cast<double>(stolen) / static_cast<double>(regions) / n;
            std::printf("%-32s %6.0f /%6.0f %6.0f /%6.0f %6.0f /%6.0f %6.0f /%6.0f %7.1f%%\n", name,
                        wm.p50, wm.p90, wx.p50, wx.p90, tl.p50, tl.p90, rg.p50, rg.p90,
                        100.0 * stolen_share);
            out.push_back({{"case", name},
                           {"task_ns", c.task_ns},
                           {"gap_ns", c.gap_ns},
                           {"wake_median_ns", {wm.p50, wm.p90}},
                           {"wake_slowest_ns", {wx.p50, wx.p90}},
                           {"tail_ns", {tl.p50, tl.p90}},
                           {"region_ns", {rg.p50, rg.p90}},
                           {"tasks_stolen", stolen_share}});
        }
    };
    {
        ThreadPool pool(n);
        measure("pool", [&](auto&& task) { pool.parallel_for(n, task); });
    }
    {
        // The pool's workers are gone: the floor's spinning threads have the cores to themselves.
        FloorPool floor(n);
        measure("floor", [&](auto&& task) {
            auto one = [&](int t) { task(t, t); };
            floor.run(one);
        });
    }
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        f << nlohmann::json{{"threads", n}, {"cases", out}}.dump(2) << "\n";
    }
    return 0;
}
