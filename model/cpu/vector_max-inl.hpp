// Per-target max over a float array, shared by the attention kernel (a key block's scores) and
// the sampler's logit passes (model/logit_math.cpp). Included after <hwy/highway.h> inside a
// foreach_target translation unit.

// Normal include guard for non-SIMD parts; the toggle re-includes per target.
#if defined(BRIGADE_MODEL_CPU_VECTOR_MAX_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef BRIGADE_MODEL_CPU_VECTOR_MAX_INL_HPP_
#undef BRIGADE_MODEL_CPU_VECTOR_MAX_INL_HPP_
#else
#define BRIGADE_MODEL_CPU_VECTOR_MAX_INL_HPP_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {

// max(x[0..n)), -inf for n == 0.
HWY_INLINE float max_of_floats(const float* x, std::int64_t n) {
    namespace hn = hwy::HWY_NAMESPACE;
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

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
