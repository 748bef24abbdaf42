#include "model/cpu/thread_count.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "model/cpu/thread_pool.hpp"

namespace brigade::model::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// A dependent chain of multiply-adds: the same time on a thread whatever its hyperthread
// sibling does (it leaves the core's ports idle), so the probe measures whether threads run,
// not how they share a core.
float chain(float x, int iterations) {
    for (int i = 0; i < iterations; ++i) x = x * 0.999999f + 1e-7f;
    return x;
}

// Iterations of `chain` that take about `ns` on this thread.
int iterations_for(int ns) {
    constexpr int kTrial = 20000;
    float sink = 1.0f;
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
        const auto t0 = Clock::now();
        sink = chain(sink, kTrial);
        best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
    }
    volatile float keep = sink;
    (void)keep;
    return std::max(1, static_cast<int>(kTrial * static_cast<double>(ns) / std::max(best, 1.0)));
}

}  // namespace

std::string describe(const ThreadCountChoice& choice, int usable) {
    std::string out = std::to_string(choice.threads) + " of " + std::to_string(usable) + " CPUs";
    if (choice.samples.empty()) return out;
    out += choice.threads == usable ? ": fewer threads were not 25% faster at fork-joins ("
                                    : ": fork-joins completed faster on fewer threads (";
    for (std::size_t i = 0; i < choice.samples.size(); ++i) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%s%d threads %.0f/s", i == 0 ? "" : ", ",
                      choice.samples[i].threads, choice.samples[i].regions_per_s);
        out += buf;
    }
    return out + "); --threads N overrides";
}

std::string oversubscription_warning(int threads, int usable) {
    if (threads <= usable) return "";
    return std::to_string(threads) + " compute threads on " + std::to_string(usable) +
           " usable CPUs: threads beyond the CPUs take turns and every parallel step waits for "
           "the last of them; --threads 0 chooses";
}

double measure_region_rate(int threads, int regions, int tasks, int task_ns) {
    ThreadPool pool(threads);
    const int iterations = iterations_for(task_ns);
    std::vector<float> sinks(static_cast<std::size_t>(pool.size()) * 16, 1.0f);
    auto region = [&] {
        pool.parallel_for(tasks, [&](std::int64_t, int thread) {
            float& s = sinks[static_cast<std::size_t>(thread) * 16];  // a line per thread
            s = chain(s, iterations);
        });
    };
    for (int r = 0; r < regions / 10 + 1; ++r) region();  // wake and warm the workers
    const auto t0 = Clock::now();
    for (int r = 0; r < regions; ++r) region();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    volatile float keep = sinks[0];
    (void)keep;
    return static_cast<double>(regions) / std::max(seconds, 1e-9);
}

std::vector<ThreadCountSample> measure_thread_counts(int hardware_threads) {
    hardware_threads = std::max(1, hardware_threads);
    // Regions shaped like a small decode matmul's: 4 tasks a thread of all of them, ~2 µs each,
    // so the fewer threads do more work per region and only win where the others do not run.
    const int tasks = 4 * hardware_threads;
    constexpr int kTaskNs = 2000;
    constexpr int kRegions = 1500;
    const int counts[] = {hardware_threads, std::max(1, hardware_threads * 3 / 4),
                          std::max(1, hardware_threads / 2)};
    std::vector<std::vector<double>> rates(std::size(counts));
    for (int round = 0; round < 3; ++round) {
        for (std::size_t i = 0; i < std::size(counts); ++i) {
            rates[i].push_back(measure_region_rate(counts[i], kRegions, tasks, kTaskNs));
        }
    }
    std::vector<ThreadCountSample> samples;
    for (std::size_t i = 0; i < std::size(counts); ++i) {
        std::sort(rates[i].begin(), rates[i].end());
        samples.push_back({counts[i], rates[i][rates[i].size() / 2]});
    }
    return samples;
}

ThreadCountChoice choose_thread_count(int hardware_threads) {
    ThreadCountChoice choice;
    choice.threads = std::max(1, hardware_threads);
    if (hardware_threads < kThreadCountProbeFrom) return choice;
    choice.samples = measure_thread_counts(hardware_threads);
    choice.threads = pick_thread_count(choice.samples);
    return choice;
}

const ThreadCountChoice& default_thread_count() {
    static const ThreadCountChoice choice = choose_thread_count(usable_cpus());
    return choice;
}

int pick_thread_count(const std::vector<ThreadCountSample>& samples) {
    if (samples.empty()) return 1;
    const ThreadCountSample& all = samples.front();
    const ThreadCountSample* best = &all;
    for (const ThreadCountSample& s : samples) {
        if (s.regions_per_s > best->regions_per_s) best = &s;
    }
    return best->regions_per_s > 1.25 * all.regions_per_s ? best->threads : all.threads;
}

}  // namespace brigade::model::cpu
