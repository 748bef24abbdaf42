// Decode GEMV for MLX affine 4- and 8-bit weights with activations quantized to int8:
// the portable parts (quantizer, scalar kernel) and the run-time choice of instruction set.
//
// Why: with f32 activations every code is widened to i32, converted to f32 and multiplied
// (matmul_grouped.cpp), which leaves 4-bit decode compute-bound at ~50-70% of the memory
// bandwidth of a 16-core Xeon. With int8 activations the codes are multiplied as bytes:
// vpdpbusd (AVX-512 VNNI / AVX-VNNI) sums 4 products u8 x s8 per i32 lane, AVX2 does it in
// two steps (vpmaddubsw + vpmaddwd); 4-bit codes only need their nibbles split.
//
// Error: |x - xq * step| <= step / 2 (rounded to nearest), so an output moves by at most
//     Σ_g scale_g · step_g / 2 · Σ_{c∈g} q_c
// (about 1/254 of max|x_g| · Σ|scale·q| per group, 258 times the int16 variant's), plus f32
// summation order. tests/unit/cpu/cpu_int8_test.cpp holds every variant to that bound.
// That is beyond the Hugging Face parity tolerance, so the path is opt-in (backend.hpp).

#include "model/cpu/matmul_int8.hpp"

#include <cmath>
#include <cstring>

#include "model/cpu/weight_decode.hpp"

namespace brigade::model::cpu {
namespace int8_detail {
namespace {

// Rounds v to the nearest integer in [-127, 127], halves away from zero. The AVX2 quantizer
// performs the same f32 operations (|v| + 0.5, clamp to 127 as minps does, truncate, sign) so
// both give equal xq. NaN becomes ±127 without undefined behaviour (its group's step is NaN).
inline std::int8_t round_to_int8(float v) {
    const float a = std::fabs(v) + 0.5f;
    const auto q = static_cast<std::int32_t>(a < 127.0f ? a : 127.0f);
    return static_cast<std::int8_t>(v < 0.0f ? -q : q);
}

}  // namespace

void quantize_scalar(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                     std::int8_t* xq, float* step, float* sum, std::int32_t* qsum) {
    const std::int64_t group = w.group_size;
    const std::int64_t cols = w.cols;
    const std::int64_t n_groups = cols / group;
    const std::int64_t row_bytes = cols / 2;  // 4-bit only
    for (std::int64_t i = begin; i < end; ++i) {
        // Group i covers elements [i * group, (i + 1) * group) of the [n, cols] array.
        const float* xg = x + i * group;
        float max_abs = 0.0f, s = 0.0f;
        for (std::int64_t e = 0; e < group; ++e) {
            max_abs = std::max(max_abs, std::fabs(xg[e]));
            s += xg[e];
        }
        const float inv = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
        // A NaN or infinity in x must not vanish in the rounding: it reaches y through step.
        step[i] = std::isfinite(s) ? max_abs / 127.0f : NAN;
        sum[i] = s;
        std::int8_t* dst = xq + (i / n_groups) * cols;
        const std::int64_t c0 = (i % n_groups) * group;
        std::int32_t total = 0;
        if (w.bits == 8) {
            for (std::int64_t e = 0; e < group; ++e) {
                dst[c0 + e] = round_to_int8(xg[e] * inv);
                total += dst[c0 + e];
            }
        } else {
            for (std::int64_t j = c0 / 2; j < (c0 + group) / 2; ++j) {
                const std::int64_t start = j - j % kInt8ChunkBytes;
                const std::int64_t k = chunk_bytes(start, row_bytes);
                const std::int8_t even = round_to_int8(x[(i / n_groups) * cols + 2 * j] * inv);
                const std::int8_t odd = round_to_int8(x[(i / n_groups) * cols + 2 * j + 1] * inv);
                dst[2 * start + (j - start)] = even;
                dst[2 * start + k + (j - start)] = odd;
                total += even + odd;
            }
        }
        qsum[i] = total;
    }
}

void gemv_rows_scalar(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                      std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy) {
    const WeightMatrix& w = m.w;
    const std::int64_t cols = w.cols, group = w.group_size, n_groups = cols / group;
    const std::int64_t row_bytes = w.row_bytes();
    const bool has_bias = bias != nullptr && bias->valid();
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const auto* row = static_cast<const std::uint8_t*>(w.data) + r * row_bytes;
        const float b = has_bias ? load_scalar(bias->dtype, bias->data, r) : 0.0f;
        for (std::int64_t t = 0; t < n; ++t) {
            const std::int8_t* xq = m.xa.xq + t * cols;
            float acc = 0.0f, bias_acc = 0.0f;
            for (std::int64_t g = 0; g < n_groups; ++g) {
                std::int32_t dot = 0;
                if (w.bits == 8) {
                    for (std::int64_t c = g * group; c < (g + 1) * group; ++c)
                        dot += row[c] * xq[c];
                } else {
                    for (std::int64_t j = g * group / 2; j < (g + 1) * group / 2; ++j) {
                        const std::int64_t start = j - j % kInt8ChunkBytes;
                        const std::int64_t k = chunk_bytes(start, row_bytes);
                        dot += (row[j] & 0x0F) * xq[2 * start + (j - start)] +
                               (row[j] >> 4) * xq[2 * start + k + (j - start)];
                    }
                }
                const std::int64_t gi = t * n_groups + g;
                const float scale = load_scalar(w.scale_dtype, w.scales, r * n_groups + g);
                const float gbias = load_scalar(w.scale_dtype, w.biases, r * n_groups + g);
                acc += scale * m.xa.step[gi] * static_cast<float>(dot);
                bias_acc += gbias * m.xa.sum[gi];
            }
            y[t * ldy + r] = acc + bias_acc + b;
        }
    }
}

}  // namespace int8_detail

namespace {

bool variant_runs_here(Int8Variant v) {
    switch (v) {
        case Int8Variant::kScalar:
            return true;
#if BRIGADE_INT8_X86
        case Int8Variant::kAvx2:
            return int8_detail::cpu_has_avx2();
        case Int8Variant::kAvxVnni:
            return int8_detail::cpu_has_avx_vnni();
        case Int8Variant::kAvx512Vnni:
            return int8_detail::cpu_has_avx512_vnni();
#endif
#if BRIGADE_INT8_NEON_DOT
        case Int8Variant::kNeonDot:
            return true;
#endif
        default:
            return false;
    }
}

}  // namespace

const char* int8_variant_name(Int8Variant variant) {
    switch (variant) {
        case Int8Variant::kAuto:
            return "auto";
        case Int8Variant::kScalar:
            return "scalar";
        case Int8Variant::kAvx2:
            return "avx2";
        case Int8Variant::kAvxVnni:
            return "avx-vnni";
        case Int8Variant::kAvx512Vnni:
            return "avx512-vnni";
        case Int8Variant::kNeonDot:
            return "neon-dotprod";
    }
    return "unknown";
}

std::vector<Int8Variant> int8_variants_available() {
    std::vector<Int8Variant> out;
    // Best last: on x86 AVX-512 VNNI and AVX-VNNI run the same instruction (vpdpbusd) at the
    // same width, either beats the two-instruction AVX2 form.
    for (Int8Variant v : {Int8Variant::kScalar, Int8Variant::kNeonDot, Int8Variant::kAvx2,
                          Int8Variant::kAvxVnni, Int8Variant::kAvx512Vnni}) {
        if (variant_runs_here(v)) out.push_back(v);
    }
    return out;
}

Int8Variant int8_resolve_variant(Int8Variant requested) {
    if (requested != Int8Variant::kAuto && variant_runs_here(requested)) return requested;
    static const Int8Variant best = int8_variants_available().back();
    return best;
}

bool int8_kernel_supports(const WeightMatrix& w) {
    const bool scales_ok = w.scale_dtype == DType::kF32 || w.scale_dtype == DType::kF16 ||
                           w.scale_dtype == DType::kBF16;
    return w.quantized() && w.valid() && (w.bits == 4 || w.bits == 8) && w.group_size > 0 &&
           w.group_size % 32 == 0 && w.cols % w.group_size == 0 && scales_ok &&
           w.scales != nullptr && w.biases != nullptr;
}

void quantize_activations_int8(const WeightMatrix& w, const float* x, std::int64_t begin,
                               std::int64_t end, std::int8_t* xq, float* step, float* sum,
                               std::int32_t* qsum) {
#if BRIGADE_INT8_X86
    static const bool avx2 = int8_detail::cpu_has_avx2();
    if (avx2) return int8_detail::quantize_avx2(w, x, begin, end, xq, step, sum, qsum);
#endif
    int8_detail::quantize_scalar(w, x, begin, end, xq, step, sum, qsum);
}

void gemv_rows_int8(Int8Variant variant, const WeightMatrix& w, const Int8Activations& xa,
                    std::int64_t n, std::int64_t row_begin, std::int64_t row_end,
                    const WeightVector* bias, float* y, std::int64_t ldy) {
    const int8_detail::Int8Rows m{w, xa};
    switch (int8_resolve_variant(variant)) {
#if BRIGADE_INT8_X86
        case Int8Variant::kAvx2:
            return int8_detail::gemv_rows_avx2(m, n, row_begin, row_end, bias, y, ldy);
        case Int8Variant::kAvxVnni:
            return int8_detail::gemv_rows_avx_vnni(m, n, row_begin, row_end, bias, y, ldy);
        case Int8Variant::kAvx512Vnni:
            return int8_detail::gemv_rows_avx512_vnni(m, n, row_begin, row_end, bias, y, ldy);
#endif
#if BRIGADE_INT8_NEON_DOT
        case Int8Variant::kNeonDot:
            return int8_detail::gemv_rows_neon_dot(m, n, row_begin, row_end, bias, y, ldy);
#endif
        default:
            return int8_detail::gemv_rows_scalar(m, n, row_begin, row_end, bias, y, ldy);
    }
}

}  // namespace brigade::model::cpu
