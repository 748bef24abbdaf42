#pragma once
// Internals of the split-int8 decode GEMV shared by matmul_split_int8.cpp (the why, the layout,
// selection, AVX-512 VNNI), matmul_split_int8_avx2.cpp (AVX-VNNI and AVX2, 256-bit) and
// matmul_split_int8_neon.cpp (Arm sdot). The public entry
// points are in kernels.hpp.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86, the CPU feature checks
#include "model/cpu/weight_decode.hpp"

namespace brigade::model::cpu::split_int8 {

// How an activation is split into int8 digits: x ≈ step · Σ_k d_k · 2^-position[k], where
// step = max|x_g| / 127 is the value of one d0 and each next digit the rounded remainder.
struct DigitPlan {
    int count;
    int position[4];
    // Bytes of a chunk's digits: count x (64 even elements + 64 odd ones).
    constexpr std::int64_t chunk_bytes() const { return 128 * count; }
    // The last digit's place (`unit`) in steps.
    constexpr float unit_in_steps() const {
        return 1.0f / static_cast<float>(1 << position[count - 1]);
    }
};
// The one- and two-token GEMV, and the AMX tiles for a batch of decode steps: two digits,
// |d0| <= 127 and |d1| <= 64, within 2^-8 of a step (3.1e-5 · max|x_g|); matmul_split_int8.cpp
// says why two.
inline constexpr DigitPlan kGemvDigits{2, {0, 7, 0, 0}};
// The AMX tiles (matmul_amx.cpp) for rows with prompt tokens, whose logits are held to Hugging
// Face's within 1e-4 of the largest: four digits, within 2^-18 of a step (3.0e-8 · max|x_g|).
inline constexpr DigitPlan kAmxDigits{4, {0, 6, 12, 17}};

// The GEMV's plan, which its kernels are written for.
inline constexpr int kDigits = kGemvDigits.count;
inline constexpr auto& kPosition = kGemvDigits.position;
inline constexpr float kUnitInSteps = kGemvDigits.unit_in_steps();
inline constexpr std::int64_t kChunkBytes = 64;   // code bytes of a chunk
inline constexpr std::int64_t kChunkElems = 128;  // their elements
inline constexpr std::int64_t kChunkDigitBytes = kGemvDigits.chunk_bytes();
// Groups whose scales are widened (and factors computed) per pass over a row tile.
inline constexpr std::int64_t kFactorGroups = 64;

inline std::int64_t n_chunks(const WeightMatrix& w) {
    return (w.cols + kChunkElems - 1) / kChunkElems;
}
// 8-bit rows (AVX-512 and AVX-VNNI): chunks of 64 elements, the GEMV's digits in element order.
inline constexpr std::int64_t kChunk8Elems = 64;
inline constexpr std::int64_t kChunk8DigitBytes = kChunk8Elems * kDigits;
inline std::int64_t token_bytes8(const WeightMatrix& w) {
    return (w.cols + kChunk8Elems - 1) / kChunk8Elems * kChunk8DigitBytes;
}
// Bytes of one token's digits under `plan`.
inline std::int64_t token_bytes(const WeightMatrix& w, const DigitPlan& plan) {
    return n_chunks(w) * plan.chunk_bytes();
}
inline int group_shift(const WeightMatrix& w) {
    return w.group_size == 32 ? 5 : (w.group_size == 64 ? 6 : 7);
}

// What a row tile needs of one matmul.
struct Tile {
    const WeightMatrix& w;
    const SplitInt8Activations& xa;
    std::int64_t n_groups;
    int group_shift;
};

// After a token's last group: zeroes the digits past the row's end in its last chunk, so that
// the padded codes (loaded as zero) meet zero digits. `token`: the token's digits.
inline void zero_padding(const WeightMatrix& w, const DigitPlan& plan, std::int8_t* token) {
    const std::int64_t used_bytes = w.cols % kChunkElems / 2;
    if (used_bytes == 0) return;
    std::int8_t* base = token + (n_chunks(w) - 1) * plan.chunk_bytes();
    for (int half = 0; half < 2 * plan.count; ++half) {
        std::memset(base + half * 64 + used_bytes, 0, static_cast<std::size_t>(64 - used_bytes));
    }
}

// Copies the first n elements of a scale or bias array (F32, F16 or BF16) from element `index`
// on into `dst` (zeroed by the caller, room for them), for a kernel's short last vector of
// group factors to load from: zeros in the other lanes, and nothing past the array read.
inline void copy_affine_first(DType dtype, const void* base, std::int64_t index, std::int64_t n,
                              unsigned char* dst) {
    const std::size_t elem = dtype == DType::kF32 ? 4 : 2;
    std::memcpy(dst,
                static_cast<const unsigned char*>(base) + static_cast<std::size_t>(index) * elem,
                static_cast<std::size_t>(n) * elem);
}

// fn(std::integral_constant<int, T>{}) for T = count, 1-4 (more counts as 4): the one place a
// kernel family's token count becomes its template argument.
template <class Fn>
void with_token_count(int count, Fn&& fn) {
    switch (count) {
        case 1:
            return fn(std::integral_constant<int, 1>{});
        case 2:
            return fn(std::integral_constant<int, 2>{});
        case 3:
            return fn(std::integral_constant<int, 3>{});
        default:
            return fn(std::integral_constant<int, 4>{});
    }
}

// Rows [row_begin, row_end) in tiles of 4 rows, then single ones, for T tokens:
// tile(r, n_rows, out) fills out[t][0, n_rows) with rows r.. · x_t; the bias is added here and
// y[t][r..] written.
template <int T, class TileFn>
void for_each_row_tile_of_tokens(std::int64_t row_begin, std::int64_t row_end,
                                 const WeightVector* bias, float* const* y, TileFn&& tile) {
    const bool has_bias = bias != nullptr && bias->valid();
    float out[T][4];
    for (std::int64_t r = row_begin; r < row_end;) {
        const std::int64_t n_rows = row_end - r >= 4 ? 4 : 1;
        tile(r, n_rows, out);
        for (std::int64_t i = 0; i < n_rows; ++i) {
            const float b = has_bias ? load_scalar(bias->dtype, bias->data, r + i) : 0.0f;
            for (int t = 0; t < T; ++t) y[t][r + i] = out[t][i] + b;
        }
        r += n_rows;
    }
}

// The same for one token: tile(r, n_rows, out) fills out[0, n_rows).
template <class TileFn>
void for_each_row_tile(std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                       float* y, TileFn&& tile) {
    float* ys[1] = {y};
    for_each_row_tile_of_tokens<1>(
        row_begin, row_end, bias, ys,
        [&](std::int64_t r, std::int64_t n, float(*out)[4]) { tile(r, n, out[0]); });
}

#if BRIGADE_INT8_X86
// AVX-512 (F, BW, VL, VNNI): 64 code bytes a step.
void split_avx512(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                  std::int64_t end, std::int8_t* digits, float* unit, float* sum);
// 8-bit weights (the GEMV's digits, element order; token_bytes8).
void split8_avx512(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                   std::int8_t* digits, float* unit, float* sum);
// 1-4 (`count`) tokens, xs[t] -> ys[t], on 4- or 8-bit rows: each chunk's codes unpacked once
// for all, every token's floats those it gets alone.
void gemv_avx512(const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
                 std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                 float* const* ys);
// 256 bits, 32 code bytes a step (matmul_split_int8_avx2.cpp). The AVX2 quantizer gives the
// AVX-512 one's digits bit for bit (the same f32 operations), its sums in another order. The
// AVX2 kernel's sums are the AVX-VNNI one's exactly, so their floats are the same.
void split_avx2(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                std::int64_t end, std::int8_t* digits, float* unit, float* sum);
// split8_avx512's digits bit for bit (its sums in another order).
void split8_avx2(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                 std::int8_t* digits, float* unit, float* sum);
// 1-4 (`count`) tokens as gemv_avx512 does, on 4-bit rows, and on 8-bit ones with `vnni`;
// `vnni`: vpdpbusd (AVX-VNNI), else vpmaddubsw + vpmaddwd (AVX2 alone).
void gemv_256(bool vnni, const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
              std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
              float* const* ys);
#endif
#if BRIGADE_INT8_NEON_DOT
// 64-bit Arm with sdot (matmul_split_int8_neon.cpp): 16 code bytes a step. The quantizer does
// the AVX-512 one's f32 operations, its sums in another order.
void split_neon(const DigitPlan& plan, const WeightMatrix& w, const float* x, std::int64_t begin,
                std::int64_t end, std::int8_t* digits, float* unit, float* sum);
// 1-4 (`count`) tokens as gemv_avx512 does, on 4-bit rows.
void gemv_neon_dot(const WeightMatrix& w, const SplitInt8Activations* const* xs, int count,
                   std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                   float* const* ys);
#endif

}  // namespace brigade::model::cpu::split_int8
