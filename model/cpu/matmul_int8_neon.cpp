// Arm variant of the int8-activation GEMV (see matmul_int8.cpp for the why and the error):
// sdot (vdotq_s32, Armv8.2 dot product): 16 s8 x s8 products summed 4 at a time into 4 i32
// lanes. Compiled only where the compiler already targets the dot product extension
// (__ARM_FEATURE_DOTPROD: Apple silicon, -march=armv8.2-a+dotprod or later); other Arm builds
// run the scalar variant.
//
// It reads the same activation layout as every variant (matmul_int8.hpp) 16 bytes of codes at
// a time; a 16-byte piece always lies inside one weight group (groups are >= 16 bytes), so
// each group has its own i32 accumulators, summed across lanes once per group.
// 4-bit codes (<= 15) are valid s8 as they are. 8-bit codes are centered, a = q - 128 (s8),
// and 128 * Σxq of the group is added back, so the integer sums equal Σ q * xq as in the
// other variants.
//
// Run only under emulation: the development machines are x86. scripts/test_arm64.sh builds the
// unit suites for aarch64 with dot products and runs them under qemu-user, where
// tests/unit/cpu/cpu_int8_test.cpp holds this kernel to the emulation. Its speed on real Arm
// cores has not been measured.

#include "model/cpu/matmul_int8.hpp"

#if BRIGADE_INT8_NEON_DOT

#include <arm_neon.h>

#include <cstring>

#include "model/cpu/weight_decode.hpp"

namespace brigade::model::cpu::int8_detail {
namespace {

inline float scale_at(DType dtype, const void* base, std::int64_t index) {
    if (dtype == DType::kBF16) {
        std::uint16_t h;
        std::memcpy(&h, static_cast<const std::uint8_t*>(base) + index * 2, 2);
        return bf16_to_f32(h);
    }
    return load_scalar(dtype, base, index);
}

// out[t] = row r · x[t0 + t] for T tokens, without the row's additive bias.
template <int BITS, int T>
void dot_row(const Int8Rows& m, std::int64_t r, std::int64_t t0, float* out) {
    const WeightMatrix& w = m.w;
    const std::int64_t cols = w.cols, group = w.group_size, n_groups = cols / group;
    const std::int64_t row_bytes = w.row_bytes();
    const std::int64_t group_bytes = group * BITS / 8;
    const std::int64_t prefetch = m.xa.prefetch_bytes;
    const auto* row = static_cast<const std::uint8_t*>(w.data) + r * row_bytes;
    float f[T], b[T];
    for (int t = 0; t < T; ++t) f[t] = b[t] = 0.0f;
    for (std::int64_t g = 0; g < n_groups; ++g) {
        int32x4_t acc[T];
        for (int t = 0; t < T; ++t) acc[t] = vdupq_n_s32(0);
        const std::int64_t first = g * group_bytes;
        for (std::int64_t j = first; j < first + group_bytes; j += 16) {
            if (prefetch > 0) __builtin_prefetch(row + j + prefetch);
            const uint8x16_t v = vld1q_u8(row + j);
            if constexpr (BITS == 8) {
                const int8x16_t a = vreinterpretq_s8_u8(veorq_u8(v, vdupq_n_u8(0x80)));
                for (int t = 0; t < T; ++t) {
                    const std::int8_t* xq = m.xa.xq + (t0 + t) * cols;
                    acc[t] = vdotq_s32(acc[t], a, vld1q_s8(xq + j));
                }
            } else {
                const std::int64_t start = j - j % kInt8ChunkBytes;
                const std::int64_t k = chunk_bytes(start, row_bytes);
                const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
                const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
                for (int t = 0; t < T; ++t) {
                    const std::int8_t* xq = m.xa.xq + (t0 + t) * cols + 2 * start + (j - start);
                    acc[t] = vdotq_s32(vdotq_s32(acc[t], lo, vld1q_s8(xq)), hi, vld1q_s8(xq + k));
                }
            }
        }
        const float scale = scale_at(w.scale_dtype, w.scales, r * n_groups + g);
        const float gbias = scale_at(w.scale_dtype, w.biases, r * n_groups + g);
        for (int t = 0; t < T; ++t) {
            const std::int64_t gi = (t0 + t) * n_groups + g;
            std::int32_t dot = vaddvq_s32(acc[t]);
            if constexpr (BITS == 8) dot += 128 * m.xa.qsum[gi];
            f[t] += scale * m.xa.step[gi] * static_cast<float>(dot);
            b[t] += gbias * m.xa.sum[gi];
        }
    }
    for (int t = 0; t < T; ++t) out[t] = f[t] + b[t];
}

template <int BITS>
void gemv_rows_bits(const Int8Rows& m, std::int64_t n, std::int64_t row_begin, std::int64_t row_end,
                    const WeightVector* bias, float* y, std::int64_t ldy) {
    const bool has_bias = bias != nullptr && bias->valid();
    float out[4];
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float b = has_bias ? load_scalar(bias->dtype, bias->data, r) : 0.0f;
        std::int64_t t = 0;
        for (; t + 4 <= n; t += 4) {
            dot_row<BITS, 4>(m, r, t, out);
            for (int i = 0; i < 4; ++i) y[(t + i) * ldy + r] = out[i] + b;
        }
        const std::int64_t left = n - t;
        if (left == 3) dot_row<BITS, 3>(m, r, t, out);
        if (left == 2) dot_row<BITS, 2>(m, r, t, out);
        if (left == 1) dot_row<BITS, 1>(m, r, t, out);
        for (std::int64_t i = 0; i < left; ++i) y[(t + i) * ldy + r] = out[i] + b;
    }
}

}  // namespace

void gemv_rows_neon_dot(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                        std::int64_t row_end, const WeightVector* bias, float* y,
                        std::int64_t ldy) {
    if (m.w.bits == 4) {
        gemv_rows_bits<4>(m, n, row_begin, row_end, bias, y, ldy);
    } else {
        gemv_rows_bits<8>(m, n, row_begin, row_end, bias, y, ldy);
    }
}

}  // namespace brigade::model::cpu::int8_detail

#endif  // BRIGADE_INT8_NEON_DOT
