// f32 FMA peak (see fma_peak.hpp), one instantiation per Highway target like the kernels.

#include "bench/fma_peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/fma_peak.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Twelve independent accumulator chains: enough to cover FMA latency (4-5 cycles) times two
// FMA ports. Returns their sum so the loop cannot be dropped; `flops` gets the work done.
float FmaChains(std::int64_t iterations, float seed, double* flops) {
    const hn::CappedTag<float, 16> d;
    const auto m = hn::Set(d, 0.9999999f);
    const auto c = hn::Set(d, 1e-7f);
    auto a0 = hn::Set(d, seed), a1 = hn::Set(d, seed + 1), a2 = hn::Set(d, seed + 2);
    auto a3 = hn::Set(d, seed + 3), a4 = hn::Set(d, seed + 4), a5 = hn::Set(d, seed + 5);
    auto a6 = hn::Set(d, seed + 6), a7 = hn::Set(d, seed + 7), a8 = hn::Set(d, seed + 8);
    auto a9 = hn::Set(d, seed + 9), a10 = hn::Set(d, seed + 10), a11 = hn::Set(d, seed + 11);
    for (std::int64_t i = 0; i < iterations; ++i) {
        a0 = hn::MulAdd(a0, m, c);
        a1 = hn::MulAdd(a1, m, c);
        a2 = hn::MulAdd(a2, m, c);
        a3 = hn::MulAdd(a3, m, c);
        a4 = hn::MulAdd(a4, m, c);
        a5 = hn::MulAdd(a5, m, c);
        a6 = hn::MulAdd(a6, m, c);
        a7 = hn::MulAdd(a7, m, c);
        a8 = hn::MulAdd(a8, m, c);
        a9 = hn::MulAdd(a9, m, c);
        a10 = hn::MulAdd(a10, m, c);
        a11 = hn::MulAdd(a11, m, c);
    }
    *flops = 2.0 * 12.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
    const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                           hn::Add(hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)),
                                   hn::Add(hn::Add(a8, a9), hn::Add(a10, a11))));
    return hn::GetLane(hn::SumOfLanes(d, s));
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::bench {

HWY_EXPORT(FmaChains);

double measure_fma_peak_gflops(model::cpu::ThreadPool& pool, int reps) {
    using Clock = std::chrono::steady_clock;
    const auto n = static_cast<std::int64_t>(pool.size());
    std::vector<double> flops(static_cast<std::size_t>(n));
    std::vector<float> sink(static_cast<std::size_t>(n));
    // ~20 ms per pass at a few hundred GFLOP/s per core: long against the fork-join and
    // clock-ramp noise, short enough to repeat.
    constexpr std::int64_t kIterations = 1 << 21;
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        pool.parallel_for(n, [&](std::int64_t task, int) {
            const auto i = static_cast<std::size_t>(task);
            sink[i] =
                HWY_DYNAMIC_DISPATCH(FmaChains)(kIterations, static_cast<float>(task), &flops[i]);
        });
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        double total = 0;
        for (double f : flops) total += f;
        best = std::max(best, total / secs / 1e9);
    }
    float s = 0;
    for (float v : sink) s += v;
    volatile float keep = s;  // the chains' results stay observable
    (void)keep;
    return best;
}

}  // namespace brigade::bench
#endif  // HWY_ONCE
