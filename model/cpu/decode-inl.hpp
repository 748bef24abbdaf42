// Per-target helpers shared by the Highway kernel files (matmul*.cpp, attention.cpp): the
// register count, picking a tile instantiation at run time, reading scales of any float
// dtype, unpacking 32-element blocks of MLX affine codes, and what the grouped (f32) and
// int16-activation row tiles share: widening a row's scales and biases and the bias term.
// Included after <hwy/highway.h> inside a foreach_target translation unit.

// Normal include guard for non-SIMD parts; the toggle re-includes per target.
#if defined(BRIGADE_MODEL_CPU_DECODE_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef BRIGADE_MODEL_CPU_DECODE_INL_HPP_
#undef BRIGADE_MODEL_CPU_DECODE_INL_HPP_
#else
#define BRIGADE_MODEL_CPU_DECODE_INL_HPP_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "model/cpu/kernels.hpp"  // BRIGADE_INLINE_LAMBDA, WeightVector
#include "model/cpu/tile_prefetch.hpp"
#include "model/cpu/weight_decode.hpp"

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vector registers of the target: 32 on AVX-512 and AArch64, 16 elsewhere. Register tiles of
// the kernels are sized from it.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM_A64
constexpr int kVectorRegisters = 32;
#else
constexpr int kVectorRegisters = 16;
#endif

// Calls f(std::integral_constant<int, K>{}) for the K among `Ks` that equals k (nothing if
// none): a kernel picks its register-tile instantiation for a count known only at run time.
// With the lambda marked BRIGADE_INLINE_LAMBDA (kernels.hpp), each case inlines as if written
// out; both must be compiled for the same target, hence this per-target header.
template <int... Ks, class F>
HWY_INLINE void with_constant(std::int64_t k, std::integer_sequence<int, Ks...>, F&& f) {
    ((k == Ks ? f(std::integral_constant<int, Ks>{}) : void()), ...);
}

HWY_INLINE float load_any(DType dtype, const void* base, std::int64_t index) {
    const auto* p = static_cast<const std::uint8_t*>(base);
    if (dtype == DType::kF32) {
        float f;
        std::memcpy(&f, p + index * 4, 4);
        return f;
    }
    std::uint16_t h;
    std::memcpy(&h, p + index * 2, 2);
    return dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Calls f(std::integral_constant<int, k>{}) for k in [1, T].
template <int T, class F>
HWY_INLINE void with_count(std::int64_t k, F&& f) {
    [&]<int... Ks>(std::integer_sequence<int, Ks...>) BRIGADE_INLINE_LAMBDA {
        ((k == Ks + 1 ? f(std::integral_constant<int, Ks + 1>{}) : void()), ...);
    }
    (std::make_integer_sequence<int, T>{});
}

// The loop of the batch kernels' register tiles (matmul.cpp's BF16/F16 rows, matmul_grouped.cpp's
// 4- and 8-bit ones): rows [row_begin, row_end) in tiles of R rows x up to T tokens, 16 rows at
// a time so that one block of tokens' activations stays in L1 across them. `tile(r, t0,
// tokens, out)`, with `tokens` a std::integral_constant of the block's token count, fills
// out[i * T + k] = row r + i times token t0 + k; the bias is added here. Returns the first row
// not done (fewer than R are left).
template <int R, int T, class Tile>
HWY_INLINE std::int64_t for_each_token_tile(std::int64_t n, std::int64_t row_begin,
                                            std::int64_t row_end, const WeightVector* bias,
                                            float* y, std::int64_t ldy, Tile&& tile) {
    constexpr std::int64_t kRowSpan = 16;
    const bool has_bias = bias != nullptr && bias->valid();
    float out[R * T];
    std::int64_t r = row_begin;
    while (r + R <= row_end) {
        const std::int64_t span = std::min(kRowSpan, (row_end - r) / R * R);
        for (std::int64_t t = 0; t < n; t += T) {
            const std::int64_t count = std::min<std::int64_t>(T, n - t);
            for (std::int64_t rr = r; rr < r + span; rr += R) {
                with_count<T>(count,
                              [&](auto tokens) BRIGADE_INLINE_LAMBDA { tile(rr, t, tokens, out); });
                for (int i = 0; i < R; ++i) {
                    const float b = has_bias ? load_any(bias->dtype, bias->data, rr + i) : 0.0f;
                    for (std::int64_t k = 0; k < count; ++k) {
                        y[(t + k) * ldy + rr + i] = out[i * T + k] + b;
                    }
                }
            }
        }
        r += span;
    }
    return r;
}

// Bits widths that are not powers of two: 8 elements occupy exactly BITS bytes, read as one
// little-endian integer and split with shifts.
template <int BITS>
HWY_INLINE void unpack_block_swar(const std::uint8_t* block, std::uint8_t* codes) {
    constexpr std::uint64_t kMask = (1u << BITS) - 1u;
    for (int u = 0; u < 4; ++u) {
        std::uint64_t v = 0;
        std::memcpy(&v, block + u * BITS, BITS);
        for (int j = 0; j < 8; ++j) {
            codes[u * 8 + j] = static_cast<std::uint8_t>((v >> (j * BITS)) & kMask);
        }
    }
}

// The 32 codes of the block at `block` (4*bits bytes) in element order: either `block` itself
// (8-bit) or `staged`, filled here.
HWY_INLINE const std::uint8_t* stage_block(const std::uint8_t* block, int bits,
                                           std::uint8_t* HWY_RESTRICT staged) {
    switch (bits) {
        case 8:
            return block;
        case 4: {
#if HWY_TARGET != HWY_SCALAR
            const hn::CappedTag<std::uint8_t, 16> d8;
            if (hn::Lanes(d8) == 16) {
                const auto v = hn::LoadU(d8, block);
                const auto lo = hn::And(v, hn::Set(d8, 0x0F));
                const auto hi = hn::ShiftRight<4>(v);
                // Byte i holds elements 2i (low nibble) and 2i+1 (high nibble).
                hn::StoreU(hn::InterleaveLower(d8, lo, hi), d8, staged);
                hn::StoreU(hn::InterleaveUpper(d8, lo, hi), d8, staged + 16);
                return staged;
            }
#endif
            for (int i = 0; i < 16; ++i) {
                staged[2 * i] = block[i] & 0x0F;
                staged[2 * i + 1] = block[i] >> 4;
            }
            return staged;
        }
        case 2:
            unpack_block_swar<2>(block, staged);
            return staged;
        case 3:
            unpack_block_swar<3>(block, staged);
            return staged;
        case 5:
            unpack_block_swar<5>(block, staged);
            return staged;
        case 6:
            unpack_block_swar<6>(block, staged);
            return staged;
        default:
            return staged;
    }
}

// Groups per chunk of a row whose scales and biases are widened to f32 up front.
constexpr std::int64_t kGroupChunk = 64;

// out[0, count) = elements [index, index + count) of an F32/F16/BF16 array of `total` elements,
// as f32. BF16 is widened a whole vector at a time, up to the end of the array: a narrow row
// (Qwen2.5-0.5B's 896 columns are 14 groups) otherwise spends as long on a scalar loop over its
// scales and biases as on its codes. Entries past `count` are scratch.
HWY_INLINE void widen_affine(DType dtype, const void* base, std::int64_t index, std::int64_t count,
                             std::int64_t total, float* HWY_RESTRICT out) {
    const hn::CappedTag<float, 16> df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    std::int64_t i = 0;
    if (dtype == DType::kBF16) {
        const hn::Rebind<hwy::bfloat16_t, decltype(df)> dbf;
        const auto* p = static_cast<const hwy::bfloat16_t*>(base) + index;
        const std::int64_t readable = total - index;  // elements that may be loaded
        for (; i < count && i + n <= readable; i += n)
            hn::Store(hn::PromoteTo(df, hn::LoadU(dbf, p + i)), df, out + i);
        if (i >= count) return;
    } else if (dtype == DType::kF32) {
        const auto* p = static_cast<const std::uint8_t*>(base) + index * 4;
        std::memcpy(out, p, static_cast<std::size_t>(count) * 4);
        return;
    }
    for (; i < count; ++i) out[i] = load_any(dtype, base, index + i);
}

// Scales and biases of groups [g0, g0 + count) of rows r0 .. r0 + R - 1 of w (n_groups a
// row), widened to f32: the row tiles of matmul_grouped.cpp and matmul_int16.cpp. n_groups
// comes from the caller, which has divided once per matmul.
template <int R>
HWY_INLINE void widen_tile_affine(const WeightMatrix& w, std::int64_t n_groups, std::int64_t r0,
                                  std::int64_t g0, std::int64_t count, float (*scale)[kGroupChunk],
                                  float (*bias)[kGroupChunk]) {
    const std::int64_t n_affine = w.rows * n_groups;
    for (int i = 0; i < R; ++i) {
        const std::int64_t at = (r0 + i) * n_groups + g0;
        widen_affine(w.scale_dtype, w.scales, at, count, n_affine, scale[i]);
        widen_affine(w.scale_dtype, w.biases, at, count, n_affine, bias[i]);
    }
}

// Σ_g bias[g] · gsum[g] over `count` groups.
HWY_INLINE float bias_dot(const float* bias, const float* gsum, std::int64_t count) {
    const hn::CappedTag<float, 16> df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    auto acc = hn::Zero(df);
    std::int64_t i = 0;
    for (; i + n <= count; i += n) {
        acc = hn::MulAdd(hn::Load(df, bias + i), hn::LoadU(df, gsum + i), acc);
    }
    float s = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; i < count; ++i) s += bias[i] * gsum[i];
    return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
