#include "model/logit_math.hpp"

#include <algorithm>
#include <cmath>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/logit_math.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::model {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float MaxOfRow(const float* x, std::int64_t n) {
    const hn::ScalableTag<float> d;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
    float m = -INFINITY;
    std::int64_t i = 0;
    if (n >= lanes) {
        auto vm = hn::LoadU(d, x);
        for (i = lanes; i + lanes <= n; i += lanes) vm = hn::Max(vm, hn::LoadU(d, x + i));
        m = hn::GetLane(hn::MaxOfLanes(d, vm));
    }
    for (; i < n; ++i) m = std::max(m, x[i]);
    return m;
}

double SumExpShifted(const float* x, std::int64_t n, float shift) {
    const hn::ScalableTag<float> d;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
    const auto vshift = hn::Set(d, shift);
    // exp() of anything below this is under 1e-38 of the largest term (which is 1): clamping
    // keeps -inf (masked tokens) inside the range Highway's Exp is defined on.
    const auto floor = hn::Set(d, -87.0f);
    constexpr std::int64_t kBlock = 256;  // float partial sums stay well within 1e-6
    double total = 0.0;
    std::int64_t i = 0;
    while (i + lanes <= n) {
        auto acc = hn::Zero(d);
        const std::int64_t end = std::min(n, i + kBlock);
        for (; i + lanes <= end; i += lanes) {
            const auto v = hn::Max(hn::Sub(hn::LoadU(d, x + i), vshift), floor);
            acc = hn::Add(acc, hn::Exp(d, v));
        }
        total += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, acc)));
    }
    for (; i < n; ++i) total += std::exp(static_cast<double>(x[i]) - shift);
    return total;
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model {

HWY_EXPORT(MaxOfRow);
HWY_EXPORT(SumExpShifted);

LogitStats logit_stats(std::span<const float> x) {
    LogitStats s;
    if (x.empty()) return s;
    const auto n = static_cast<std::int64_t>(x.size());
    s.max = HWY_DYNAMIC_DISPATCH(MaxOfRow)(x.data(), n);
    s.argmax = std::find(x.begin(), x.end(), s.max) - x.begin();
    if (s.argmax == n) {
        // NaNs (a corrupt checkpoint) can make the vector max NaN, which no entry equals: fall
        // back to the scalar first maximum, which skips them, so the token stays in range.
        std::int64_t best = 0;
        for (std::int64_t i = 1; i < n; ++i) {
            if (x[static_cast<std::size_t>(i)] > x[static_cast<std::size_t>(best)]) best = i;
        }
        s.argmax = best;
        s.max = x[static_cast<std::size_t>(best)];
    }
    s.sum_exp = HWY_DYNAMIC_DISPATCH(SumExpShifted)(x.data(), n, s.max);
    return s;
}

}  // namespace brigade::model
#endif  // HWY_ONCE
