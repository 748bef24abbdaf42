// Split-int8 decode GEMV for 64-bit Arm with the dot-product extension (sdot, vdotq_s32): the
// same digits and sums as the x86 kernels (matmul_split_int8.cpp gives the why, the error and
// the layout), 16 code bytes a step.
//
// Why on Arm: the f32 kernels run 4 lanes per NEON instruction, so a 4-bit code costs about one
// instruction (widening, conversion and FMA of 4 codes take 3-4). sdot multiplies 16 signed
// bytes by 16 and sums them by fours into 4 int32 lanes. Per 16 code bytes (32 elements) and
// row: AND, shift, 4 sdot, a multiply-add, a conversion and an FMA, 9 instructions, against
// about 30 for the same codes in the f32 grouped kernel.
//
// Codes (0..15) are valid signed bytes, so sdot (signed x signed) takes them as they are. A lane
// sums 4 low-nibble and 4 high-nibble products per digit, the 8 products of the x86 lanes, so
// A = S0·2^7 + S1 is exact in int32 here too. Groups are 32 elements or
// more and start on multiples of 32, so the 32 elements of a step lie in one group: one factor
// per step. Rows are a whole number of steps (cols is a multiple of the group), so no code byte
// past a row is read and the last chunk needs no mask.
//
// Run only under emulation (qemu-user, scripts/test_arm64.sh): the tests hold it to the
// reference like the x86 variants. Its speed on Arm cores has not been measured; CpuTuning's
// split_int8_activations (engine_bench --ab split-int8) switches it off.

#include "model/cpu/matmul_split_int8.hpp"

#if BRIGADE_INT8_NEON_DOT

#include <arm_neon.h>

#include <algorithm>

#include "model/cpu/tile_prefetch.hpp"

namespace brigade::model::cpu::split_int8 {
namespace {

// The plan's digits of 16 activations (four vectors) into 16 bytes each at dst + k * 128; `step`
// is the value of one d0 and `inv` its inverse. The operations and roundings are the AVX-512
// quantizer's, so the digits should be the same (NaN activations aside; never compared across
// the two machines).
inline void store_digits(const DigitPlan& plan, const float32x4_t (&x)[4], float inv, float step,
                         std::int8_t* dst) {
    float32x4_t r[4] = {x[0], x[1], x[2], x[3]};  // what the digits so far leave
    for (int k = 0; k < plan.count; ++k) {
        const float finer = static_cast<float>(1 << plan.position[k]);  // exact powers of two
        const float32x4_t scale = vdupq_n_f32(inv * finer);
        const float32x4_t back = vdupq_n_f32(step * (1.0f / finer));
        int16x4_t narrow[4];
        for (int j = 0; j < 4; ++j) {
            const float32x4_t v = vrndnq_f32(vmulq_f32(r[j], scale));  // ties to even
            r[j] = vfmsq_f32(r[j], v, back);  // r - v·step/finer, one rounding
            narrow[j] = vqmovn_s32(vcvtnq_s32_f32(v));
        }
        const int8x16_t bytes = vcombine_s8(vqmovn_s16(vcombine_s16(narrow[0], narrow[1])),
                                            vqmovn_s16(vcombine_s16(narrow[2], narrow[3])));
        vst1q_s8(dst + k * 128, bytes);
    }
}

inline void group_max_sum(const float* xg, std::int64_t group, float& m, float& s) {
    float32x4_t max_abs = vdupq_n_f32(0.0f), total = vdupq_n_f32(0.0f);
    for (std::int64_t e = 0; e < group; e += 4) {
        const float32x4_t v = vld1q_f32(xg + e);
        max_abs = vmaxq_f32(max_abs, vabsq_f32(v));  // NaN propagates
        total = vaddq_f32(total, v);
    }
    m = vmaxvq_f32(max_abs);
    s = vaddvq_f32(total);
}

inline void store_block(const DigitPlan& plan, const float* xb, float inv, float step,
                        std::int8_t* even, std::int8_t* odd) {
    float32x4_t e[4], o[4];
    for (int j = 0; j < 4; ++j) {
        const float32x4x2_t pair = vld2q_f32(xb + 8 * j);  // de-interleaves even and odd
        e[j] = pair.val[0];
        o[j] = pair.val[1];
    }
    store_digits(plan, e, inv, step, even);
    store_digits(plan, o, inv, step, odd);
}

#include "model/cpu/matmul_split_int8_quantize-inl.hpp"

// 4 scales (or biases) from element `index` of an F32/F16/BF16 array.
inline float32x4_t load_affine(DType dtype, const void* base, std::int64_t index) {
    if (dtype == DType::kF32) return vld1q_f32(static_cast<const float*>(base) + index);
    const auto* p = static_cast<const std::uint16_t*>(base) + index;
    if (dtype == DType::kF16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));  // bf16: the high half of f32
}

// The first n (<= 4) floats at p, zeros in the other lanes; nothing past them is read.
inline float32x4_t load_first(const float* p, std::int64_t n) {
    if (n == 4) return vld1q_f32(p);
    float32x4_t v = vld1q_lane_f32(p, vdupq_n_f32(0.0f), 0);
    if (n > 1) v = vld1q_lane_f32(p + 1, v, 1);
    if (n > 2) v = vld1q_lane_f32(p + 2, v, 2);
    return v;
}

// load_affine of the first n (<= 4) elements, zeros in the other lanes; nothing past them is
// read.
inline float32x4_t load_affine_first(DType dtype, const void* base, std::int64_t index,
                                     std::int64_t n) {
    if (n == 4) return load_affine(dtype, base, index);
    alignas(16) unsigned char first[16] = {};
    copy_affine_first(dtype, base, index, n, first);
    return load_affine(dtype, first, 0);
}

// A = S0 · 2^7 + S1 for 16 code bytes (their low and high nibbles) and the matching digits
// (d[2k]: digit k's even elements, d[2k + 1]: its odd ones): the first digit's chain, shifted,
// is where the second digit's starts (as on x86; two chains joined by a multiply-add took a
// zeroed register more per row and step: 3-10% more instructions under qemu).
inline int32x4_t step_sum(int8x16_t lo, int8x16_t hi, const int8x16_t (&d)[2 * kDigits]) {
    int32x4_t a = vdotq_s32(vdupq_n_s32(0), lo, d[0]);
    a = vdotq_s32(a, hi, d[1]);
    int32x4_t sum = vdotq_s32(vshlq_n_s32(a, kPosition[1] - kPosition[0]), lo, d[2]);
    return vdotq_s32(sum, hi, d[3]);
}

// out[t][i] = row r0 + i · x_t for R rows and T tokens (xa[t]), without the rows' additive
// bias. The rows share each step's digits (loaded once per token), and the tokens each row's
// codes (loaded and split into nibbles once); every token's floats are those it gets alone (the
// same operations in the same order).
template <int R, int T>
void dot_tile(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
              float (*out)[4]) {
    const WeightMatrix& w = m.w;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = w.row_bytes();
    const std::int64_t steps = row_bytes / 16;  // cols is a multiple of 32
    const uint8x16_t nibble = vdupq_n_u8(0x0F);
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    // Each token's and row's sum of A · factor per lane, its bias terms included (one
    // reduction at the end).
    float32x4_t f[T][R];
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) f[t][i] = vdupq_n_f32(0.0f);
    }
    float factor[T][R][kFactorGroups];  // scale · unit per token, row and group of the pass
    TilePrefetch<R> prefetch(m.xa.prefetch_bytes, row_bytes, m.xa.next_tile_prefetch_row_bytes);
    // Elements of a step: 32, so a group spans 2^(group_shift - 5) steps.
    const int steps_per_group_shift = m.group_shift - 5;
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, n_groups - g0);
        for (int i = 0; i < R; ++i) {
            const std::int64_t at = (r0 + i) * n_groups + g0;
            for (std::int64_t g = 0; g < count; g += 4) {
                // A last 1-3 groups take zeros in the other lanes (zero factors, zero bias
                // terms), as on x86: a scalar tail per token took 2 of Qwen2.5-0.5B's 14 groups.
                const std::int64_t n = std::min<std::int64_t>(4, count - g);
                const float32x4_t scale = load_affine_first(w.scale_dtype, w.scales, at + g, n);
                const float32x4_t bias = load_affine_first(w.scale_dtype, w.biases, at + g, n);
                for (int t = 0; t < T; ++t) {
                    vst1q_f32(factor[t][i] + g,
                              vmulq_f32(scale, load_first(xa[t]->unit + g0 + g, n)));
                    f[t][i] = vfmaq_f32(f[t][i], bias, load_first(xa[t]->sum + g0 + g, n));
                }
            }
        }
        const std::int64_t s_begin = g0 << steps_per_group_shift;
        const std::int64_t s_end = std::min(steps, (g0 + count) << steps_per_group_shift);
        for (std::int64_t s = s_begin; s < s_end; ++s) {
            // Step s: code bytes [16s, 16s + 16) of each row, chunk c = s / 4, quarter q.
            const std::int64_t c = s >> 2, q = s & 3;
            if (q == 0) prefetch.ahead_of(codes, c * kChunkBytes);  // one line a chunk
            int8x16_t d[T][2 * kDigits];
            for (int t = 0; t < T; ++t) {
                const std::int8_t* dig = xa[t]->digits + c * kChunkDigitBytes + q * 16;
                for (int k = 0; k < kDigits; ++k) {
                    d[t][2 * k] = vld1q_s8(dig + 128 * k);           // even elements
                    d[t][2 * k + 1] = vld1q_s8(dig + 128 * k + 64);  // odd ones
                }
            }
            const std::int64_t group = (s >> steps_per_group_shift) - g0;  // within the pass
            for (int i = 0; i < R; ++i) {
                const uint8x16_t v = vld1q_u8(codes[i] + s * 16);
                const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, nibble));
                const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
                for (int t = 0; t < T; ++t) {
                    f[t][i] = vfmaq_n_f32(f[t][i], vcvtq_f32_s32(step_sum(lo, hi, d[t])),
                                          factor[t][i][group]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) out[t][i] = vaddvq_f32(f[t][i]);
    }
}

template <int T>
void gemv_tokens(const WeightMatrix& w, const SplitInt8Activations* const* xa,
                 std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                 float* const* y) {
    const Tile m{w, *xa[0], w.cols / w.group_size, group_shift(w)};
    for_each_row_tile_of_tokens<T>(
        row_begin, row_end, bias, y, [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
            n == 4 ? dot_tile<4, T>(m, xa, r, out) : dot_tile<1, T>(m, xa, r, out);
        });
}

}  // namespace

void split_neon(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                std::int64_t end, std::int8_t* digits, float* unit, float* sum) {
    split_groups(plan, w, x, begin, end, digits, unit, sum);
}

void gemv_neon_dot(const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
                   std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                   float* const* ys) {
    with_token_count(count, [&](auto t) {
        gemv_tokens<decltype(t)::value>(w, xs, row_begin, row_end, bias, ys);
    });
}

}  // namespace brigade::model::cpu::split_int8

#endif  // BRIGADE_INT8_NEON_DOT
