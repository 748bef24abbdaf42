// Element-wise and row-wise kernels of the CPU backend (Highway, one instantiation per target):
// RMSNorm, SiLU-gated product, residual add and the KV cache's f32 -> f16 rows. They are
// bandwidth-light next to the matmuls; vectorizing them keeps them from showing up in a decode
// profile at all.

#include <cmath>
#include <cstring>

#include "model/cpu/kernels.hpp"
#include "model/cpu/weight_decode.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu/ops.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Lanes of a norm weight starting at element `j`, widened to f32.
HWY_INLINE hn::Vec<DF> load_vector_lanes(const WeightVector& v, std::int64_t j) {
    const DF df;
    const auto* p = static_cast<const std::uint8_t*>(v.data);
    if (v.dtype == DType::kF32) return hn::LoadU(df, reinterpret_cast<const float*>(p + j * 4));
    if (v.dtype == DType::kBF16) {
        const hn::Rebind<hwy::bfloat16_t, DF> dbf;
        return hn::PromoteTo(df,
                             hn::LoadU(dbf, reinterpret_cast<const hwy::bfloat16_t*>(p + j * 2)));
    }
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p + j * 2)));
}

void RmsNormRows(const float* x, const WeightVector& weight, std::int64_t row_begin,
                 std::int64_t row_end, std::int64_t d, float eps, float* y) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    for (std::int64_t i = row_begin; i < row_end; ++i) {
        const float* xi = x + i * d;
        float* yi = y + i * d;
        auto s0 = hn::Zero(df);
        auto s1 = hn::Zero(df);
        std::int64_t j = 0;
        for (; j + 2 * n <= d; j += 2 * n) {
            const auto a = hn::LoadU(df, xi + j);
            const auto b = hn::LoadU(df, xi + j + n);
            s0 = hn::MulAdd(a, a, s0);
            s1 = hn::MulAdd(b, b, s1);
        }
        for (; j + n <= d; j += n) {
            const auto a = hn::LoadU(df, xi + j);
            s0 = hn::MulAdd(a, a, s0);
        }
        float sum_sq = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
        for (; j < d; ++j) sum_sq += xi[j] * xi[j];
        const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps);
        const auto vinv = hn::Set(df, inv_rms);
        j = 0;
        for (; j + n <= d; j += n) {
            const auto v =
                hn::Mul(hn::Mul(hn::LoadU(df, xi + j), vinv), load_vector_lanes(weight, j));
            hn::StoreU(v, df, yi + j);
        }
        for (; j < d; ++j) yi[j] = (xi[j] * inv_rms) * load_scalar(weight.dtype, weight.data, j);
    }
}

void SiluMulRange(const float* gate, const float* up, std::int64_t begin, std::int64_t end,
                  float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto one = hn::Set(df, 1.0f);
    // hwy's Exp is specified up to +88; exp(88) already makes silu(g) 0 to f32 precision.
    const auto max_arg = hn::Set(df, 88.0f);
    std::int64_t i = begin;
    for (; i + n <= end; i += n) {
        const auto g = hn::LoadU(df, gate + i);
        const auto e = hn::Exp(df, hn::Min(hn::Neg(g), max_arg));
        const auto s = hn::Div(g, hn::Add(one, e));
        hn::StoreU(hn::Mul(s, hn::LoadU(df, up + i)), df, out + i);
    }
    for (; i < end; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void AddRange(const float* a, const float* b, std::int64_t begin, std::int64_t end, float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    std::int64_t i = begin;
    for (; i + n <= end; i += n) {
        hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
    }
    for (; i < end; ++i) out[i] = a[i] + b[i];
}

void StoreF16Range(const float* x, std::int64_t begin, std::int64_t end, std::uint16_t* out) {
    std::int64_t i = begin;
#if !((HWY_ARCH_X86 && HWY_TARGET >= HWY_SSE4) || HWY_TARGET == HWY_EMU128 || \
      HWY_TARGET == HWY_SCALAR)
    // F16C (x86 from AVX2 on) and Arm convert with round to nearest even; Highway's emulation
    // on older targets truncates, so those take the scalar loop below.
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto hi = hn::Set(df, 65504.0f);
    const auto lo = hn::Set(df, -65504.0f);
    auto* h = reinterpret_cast<hwy::float16_t*>(out);
    // (A NaN lane may come out as ±65504 here: a NaN activation has spoiled the step anyway.)
    for (; i + n <= end; i += n) {
        const auto v = hn::Min(hn::Max(hn::LoadU(df, x + i), lo), hi);
        hn::StoreU(hn::DemoteTo(dh, v), dh, h + i);
    }
#endif
    for (; i < end; ++i) out[i] = f32_to_f16_saturated(x[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model::cpu {

HWY_EXPORT(RmsNormRows);
HWY_EXPORT(SiluMulRange);
HWY_EXPORT(AddRange);
HWY_EXPORT(StoreF16Range);

void rms_norm_rows(const float* x, const WeightVector& weight, std::int64_t row_begin,
                   std::int64_t row_end, std::int64_t d, float eps, float* y) {
    HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, weight, row_begin, row_end, d, eps, y);
}

void silu_mul_range(const float* gate, const float* up, std::int64_t begin, std::int64_t end,
                    float* out) {
    HWY_DYNAMIC_DISPATCH(SiluMulRange)(gate, up, begin, end, out);
}

void add_range(const float* a, const float* b, std::int64_t begin, std::int64_t end, float* out) {
    HWY_DYNAMIC_DISPATCH(AddRange)(a, b, begin, end, out);
}

void store_f16_range(const float* x, std::int64_t begin, std::int64_t end, std::uint16_t* out) {
    HWY_DYNAMIC_DISPATCH(StoreF16Range)(x, begin, end, out);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
