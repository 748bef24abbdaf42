#pragma once
// Entry points of the SIMD kernels of the CPU backend. Each is implemented once per Highway
// target (AVX2, AVX-512, SSE4, NEON, SVE, ...) and picked at run time by HWY_DYNAMIC_DISPATCH,
// so one binary runs at the best width the machine offers. All of them are single-threaded:
// `CpuBackend` splits the work over its thread pool and calls these on slices.
//
// Every kernel is held to the scalar reference (reference_backend.cpp) by tests/unit/cpu.

#include <cstdint>
#include <vector>

#include "model/backend.hpp"
#include "model/tensor.hpp"

namespace brigade::model::cpu {

// Marks a kernel's lambda for with_constant (decode-inl.hpp) to be inlined.
#define BRIGADE_INLINE_LAMBDA __attribute__((always_inline))

// y[t * ldy + r] = dot(x[t, :], W[r, :]) (+ bias[r]) for rows r in [row_begin, row_end) and
// tokens t in [0, n). `row_scratch` holds 4 * w.cols floats: for n > 4 rows are taken in tiles
// of 2-4 and non-f32 rows are decoded there once and reused for every token; for n <= 4 they
// are decoded in registers (fused). With row_scratch null, n > 4 is only allowed for plain rows
// and runs one row at a time. `prefetch_bytes` > 0: plain rows at n <= 4 prefetch that far
// ahead in the row stream.
void gemv_rows(const WeightMatrix& w, const float* x, std::int64_t n, std::int64_t row_begin,
               std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy,
               float* row_scratch, std::int64_t prefetch_bytes = 0);
// gemv_rows for BF16 and F16 rows (other formats: nothing) in tiles of 2 rows x up to 8 tokens
// (4 where the target has 16 vector registers), widened in registers, for batches of 5-8;
// returns the first row not done (at most one is left, for gemv_rows).
std::int64_t gemv_rows_plain_tiles(const WeightMatrix& w, const float* x, std::int64_t n,
                                   std::int64_t row_begin, std::int64_t row_end,
                                   const WeightVector* bias, float* y, std::int64_t ldy,
                                   std::int64_t prefetch_bytes);

// Batched decode (up to 31 tokens) with the tokens along the vector (matmul.cpp): x [n, cols]
// transposed into xt [cols, batched_token_stride(n)] (columns [c_begin, c_end) per call, the
// lanes past n zero) by `transpose_tokens`; `gemv_rows_batched` then writes y as `gemv_rows`
// does, decoding blocks of each row into `row_scratch` (batched_row_scratch_floats() floats).
// Every output is summed over the columns in order, so any split of the rows gives the same
// bits.
// Columns gemv_rows_batched decodes per block, most rows in one register tile and most f32
// lanes of a target (xt rows are padded to a multiple of them).
inline constexpr std::int64_t kBatchedBlockCols = 256;
inline constexpr int kBatchedMaxRows = 16;
inline constexpr std::int64_t kBatchedMaxLanes = 16;
std::int64_t batched_token_stride(std::int64_t n);
std::int64_t batched_row_scratch_floats();
// Whether gemv_rows_batched takes w (quantized groups of at most 256 columns).
bool batched_kernel_supports(const WeightMatrix& w);
// The fewest tokens from which gemv_rows_batched is used by default on this CPU's target:
// where measured faster than gemv_rows (AVX2: 9), else a number past any decode batch.
std::int64_t batched_min_tokens();
void transpose_tokens(const float* x, std::int64_t n, std::int64_t cols, std::int64_t c_begin,
                      std::int64_t c_end, float* xt);
void gemv_rows_batched(const WeightMatrix& w, const float* xt, std::int64_t n,
                       std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                       float* y, std::int64_t ldy, float* row_scratch,
                       std::int64_t prefetch_bytes = 0);

// Activations of a quantized-weight GEMV as int16 per weight group (matmul_int16.cpp):
// xq [n, cols] in the kernel's layout, step [n, n_groups] (x ≈ xq * step) and sum
// [n, n_groups] (the exact f32 sum of each group of x, for the bias term).
struct Int16Activations {
    const std::int16_t* xq = nullptr;
    const float* step = nullptr;
    const float* sum = nullptr;
    std::int64_t prefetch_bytes = 0;  // software prefetch distance in the weights; 0 = none
    bool multi_row = true;            // 4/8-bit: rows in tiles of several (false: one by one)
    std::int64_t next_tile_prefetch_row_bytes = 0;  // CpuTuning's; TilePrefetch
};
// Quantizes groups [begin, end) of x[n, w.cols] (group i = token i / n_groups, group
// i % n_groups) for `gemv_rows_int16` with w's bits and group size.
void quantize_activations_int16(const WeightMatrix& w, const float* x, std::int64_t begin,
                                std::int64_t end, std::int16_t* xq, float* step, float* sum);
// Whether quantize_activations_int16 runs vector code for w on this CPU (else it is a scalar
// loop worth spreading over the pool for long rows).
bool quantize_int16_is_vectorized(const WeightMatrix& w);
// As `gemv_rows` for a quantized w, from int16 activations (max error in matmul_int16.cpp).
void gemv_rows_int16(const WeightMatrix& w, const Int16Activations& xa, std::int64_t n,
                     std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                     float* y, std::int64_t ldy);

// Activations of a 4- or 8-bit quantized-weight GEMV with f32 arithmetic (matmul_grouped.cpp):
// x [n, cols] in the kernel's order (4-bit: nibble order per chunk, written by
// `prepare_grouped_activations`; 8-bit: the activations themselves) and group_sum
// [n, n_groups], the f32 sum of each weight group of x.
struct GroupedActivations {
    const float* x = nullptr;
    const float* group_sum = nullptr;
    std::int64_t prefetch_bytes = 0;  // software prefetch distance in the weights; 0 = none
    bool q4_lookup = true;            // AVX-512: 4-bit rows through a per-group lookup table
    bool multi_row = true;            // one token: 2-4 rows per pass (false: one at a time)
    std::int64_t next_tile_prefetch_row_bytes = 0;  // CpuTuning's; TilePrefetch
};
// Whether `gemv_rows_grouped` takes w (MLX affine 4 or 8 bits, group a multiple of 32).
bool grouped_kernel_supports(const WeightMatrix& w);
// Whether `gemv_rows_grouped` takes batches of 5 and more tokens in AVX-512's tiles of 2 rows x
// 8 tokens (the kernels dispatched here are AVX-512's); elsewhere they go through the portable
// tiles (1 or 2 rows x 8 tokens), which CpuTuning::grouped_max_tokens keeps to 8 tokens.
bool grouped_token_tiles_available();
// Fills group_sum (and, for 4-bit, xp) for groups [begin, end) of x[n, w.cols] (group i =
// token i / n_groups, group i % n_groups).
void prepare_grouped_activations(const WeightMatrix& w, const float* x, std::int64_t begin,
                                 std::int64_t end, float* xp, float* group_sum);
// As `gemv_rows` for a w that `grouped_kernel_supports`, any n (CpuTuning::grouped_max_tokens
// says up to where it beats gemv_rows).
void gemv_rows_grouped(const WeightMatrix& w, const GroupedActivations& xa, std::int64_t n,
                       std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                       float* y, std::int64_t ldy);

// Activations of a 4-bit quantized-weight GEMV split into two int8 digits each
// (matmul_split_int8*.cpp; AVX-512 VNNI, AVX-VNNI, AVX2 or Arm sdot; 8-bit weights too with
// AVX-512 VNNI and AVX-VNNI):
// for weight group g of a token,
//     x ≈ step_g · (d0 + d1·2^-7),  step_g = max|x_g| / 127,
// within half the last digit (3.1e-5 · max|x_g|; matmul_split_int8.cpp says why that suffices).
// `unit` is step_g · 2^-7. Layout of `digits` in matmul_split_int8.cpp.
struct SplitInt8Activations {
    const std::int8_t* digits = nullptr;  // [n, split_int8_token_bytes(w)]
    const float* unit = nullptr;          // [n, n_groups]: unit_g above
    const float* sum = nullptr;           // [n, n_groups]: f32 sums of the unrounded x
    std::int64_t prefetch_bytes = 0;      // software prefetch distance in the codes; 0 = none
    std::int64_t next_tile_prefetch_row_bytes = 0;  // CpuTuning's; TilePrefetch
};
// Instruction sets of the split-int8 kernels, picked at run time (tests and benches force each).
enum class SplitInt8Variant : int {
    kAuto,        // the best this machine runs
    kAvx2,        // AVX2 alone, vpmaddubsw + vpmaddwd for vpdpbusd: 32 code bytes a step
                  // (Haswell to Comet Lake, AMD Zen 1-3)
    kAvxVnni,     // AVX2 + AVX-VNNI: 32 code bytes a step (Alder Lake and later client cores)
    kAvx512Vnni,  // AVX-512 VNNI: 64 code bytes a step
    kNeonDot,     // 64-bit Arm sdot: 16 code bytes a step (compiled with __ARM_FEATURE_DOTPROD)
};
const char* split_int8_variant_name(SplitInt8Variant variant);
// The variants this machine runs, the best last (empty: no split-int8 here).
std::vector<SplitInt8Variant> split_int8_variants_available();
// `requested`, or the best available when it is kAuto or this machine cannot run it (kAuto
// when none runs).
SplitInt8Variant split_int8_resolve_variant(SplitInt8Variant requested);
// Whether this CPU runs a split-int8 kernel of `variant` (kAuto: the best) and it takes w (MLX
// affine 4 bits, or 8 bits with AVX-512 VNNI; groups of 32, 64 or 128, F32/F16/BF16 scales).
bool split_int8_kernel_supports(const WeightMatrix& w,
                                SplitInt8Variant variant = SplitInt8Variant::kAuto);
// Bytes of `digits` per token for w.
std::int64_t split_int8_token_bytes(const WeightMatrix& w);
// Splits groups [begin, end) of x[n, w.cols] (group i = token i / n_groups, group
// i % n_groups) into digits, unit and sum. Only where split_int8_kernel_supports(w); every
// variant writes the same digits.
void split_activations_int8(SplitInt8Variant variant, const WeightMatrix& w, const float* x,
                            std::int64_t begin, std::int64_t end, std::int8_t* digits, float* unit,
                            float* sum);
// y[r] = dot(x, W[r, :]) (+ bias[r]) for rows [row_begin, row_end) of a w that
// split_int8_kernel_supports, one token.
void gemv_rows_split_int8(SplitInt8Variant variant, const WeightMatrix& w,
                          const SplitInt8Activations& xa, std::int64_t row_begin,
                          std::int64_t row_end, const WeightVector* bias, float* y);
// The same for two tokens: together where the kernel takes them so (AVX-512: each chunk's
// codes unpacked once for both), else one after the other. Each token gets its floats alone.
void gemv_rows_split_int8_pair(SplitInt8Variant variant, const WeightMatrix& w,
                               const SplitInt8Activations& x0, const SplitInt8Activations& x1,
                               std::int64_t row_begin, std::int64_t row_end,
                               const WeightVector* bias, float* y0, float* y1);
// Three or four (`count`) tokens in one pass where the kernel has it (AVX-512: each chunk's
// codes unpacked once for all; returns false and does nothing elsewhere). Each token gets its
// floats alone.
bool gemv_rows_split_int8_many(SplitInt8Variant variant, const WeightMatrix& w,
                               const SplitInt8Activations* const* xs, int count,
                               std::int64_t row_begin, std::int64_t row_end,
                               const WeightVector* bias, float* const* ys);

// Decode of 2-31 tokens (by default from 3 on 4-bit, 4 on 8-bit) on 4- and 8-bit weights through
// AMX tiles (matmul_amx.cpp; x86 with AMX-INT8, AVX-512 and Linux's permission), the activations
// split into split-int8's digits, `digits` of them (4: split_int8::kAmxDigits, 2: kGemvDigits).
// `prepare_amx_activations` fills, for weight groups [group_begin, group_end) of all n tokens,
// the B tiles (`tiles`, amx_tile_bytes) and per token block, group and token the unit and f32
// sum ([amx_token_blocks(n, digits)][n_groups][16] each, 0 past n), through the split-int8
// layout in `staging` (amx_staging_bytes; staging_unit and staging_sum [n, n_groups]).
struct AmxBuffers {
    std::int8_t* staging = nullptr;
    float* staging_unit = nullptr;
    float* staging_sum = nullptr;
    std::int8_t* tiles = nullptr;
    float* unit = nullptr;
    float* sum = nullptr;
    int digits = 4;
    // Two groups to a narrow block's C tile where its tokens fill half the columns
    // (CpuTuning::amx_pair_groups); the kernel must be given the same.
    bool pair_groups = false;
    // 4-bit pairs' tiles split by nibble (CpuTuning::amx_pair_nibbles); the same for the kernel.
    bool pair_nibbles = false;
};
struct AmxActivations {
    const std::int8_t* tiles = nullptr;
    const float* unit = nullptr;
    const float* sum = nullptr;
    std::int64_t prefetch_bytes = 0;  // software prefetch distance in the codes; 0 = none
    // Prefetch the next 16-row block's codes while a block is multiplied (CpuTuning::
    // amx_prefetch_next_block) instead of prefetch_bytes ahead in each row.
    bool prefetch_next_block = true;
    int digits = 4;             // as prepared: 4 or 2
    bool pair_groups = false;   // as prepared (AmxBuffers::pair_groups)
    bool pair_nibbles = false;  // as prepared (AmxBuffers::pair_nibbles)
};
// Whether this process may use AMX-INT8 tiles (asks Linux for them once).
bool amx_available();
// amx_available() and w is MLX affine 4 or 8 bits, groups of 32, 64 or 128, F32/F16/BF16 scales.
bool amx_kernel_supports(const WeightMatrix& w);
// Whether n tokens of `digits` digits on w take paired narrow blocks (AmxBuffers::pair_groups
// set: two groups to a C tile; amx_layout.hpp's Layout says how).
bool amx_pairs_groups(const WeightMatrix& w, std::int64_t n, int digits, bool pair_groups);
std::int64_t amx_token_blocks(std::int64_t n, int digits);
std::int64_t amx_tile_bytes(const WeightMatrix& w, std::int64_t n, int digits);
std::int64_t amx_staging_bytes(const WeightMatrix& w, std::int64_t n, int digits);
// Floats of `row_scratch` gemv_rows_amx needs per thread.
std::int64_t amx_row_scratch_floats(const WeightMatrix& w);
void prepare_amx_activations(const WeightMatrix& w, const float* x, std::int64_t n,
                             std::int64_t group_begin, std::int64_t group_end,
                             const AmxBuffers& buffers);
// As gemv_rows for a w that amx_kernel_supports, 1 to 31 tokens. Each row's sums do not depend
// on the other rows of its tile, so any split of the rows gives the same bits.
void gemv_rows_amx(const WeightMatrix& w, const AmxActivations& xa, std::int64_t n,
                   std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias, float* y,
                   std::int64_t ldy, float* row_scratch);

// The same for BF16 weights through AMX-BF16 tiles (matmul_amx_bf16.cpp): each activation as
// three bf16 terms (their sum within 2^-27 of it). `tiles` (amx_bf16_tile_bytes) holds them per
// token block and 32-column step; prepare_amx_bf16_activations fills steps [step_begin,
// step_end) of all n tokens.
bool amx_bf16_available();
// amx_bf16_available() and w is BF16 with a multiple of 32 columns.
bool amx_bf16_kernel_supports(const WeightMatrix& w);
std::int64_t amx_bf16_tile_bytes(const WeightMatrix& w, std::int64_t n);
// Floats of `row_scratch` gemv_rows_amx_bf16 needs per thread (a zero-padded short row tile).
std::int64_t amx_bf16_row_scratch_floats(const WeightMatrix& w);
void prepare_amx_bf16_activations(const WeightMatrix& w, const float* x, std::int64_t n,
                                  std::int64_t step_begin, std::int64_t step_end,
                                  std::uint16_t* tiles);
void gemv_rows_amx_bf16(const WeightMatrix& w, const std::uint16_t* tiles, std::int64_t n,
                        std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                        float* y, std::int64_t ldy, std::int64_t prefetch_bytes,
                        float* row_scratch);

// Activations of a 4- or 8-bit quantized-weight GEMV as int8 with integer dot products
// (matmul_int8*.cpp; opt-in, CpuTuning::int8_activations). Each weight group g of a token's x
// is rounded to xq in [-127, 127] with step_g = max|x_g| / 127, and a row is
//     y = Σ_g scale_g · step_g · Σ_{c∈g} q_c · xq_c  +  Σ_g bias_g · Σ_{c∈g} x_c
// with the integer sums exact in int32 and Σx the f32 sum of the unrounded x.
// Instruction sets, picked at run time; each is also callable on its own (tests, benches).
enum class Int8Variant : int {
    kAuto,        // the best this machine runs
    kScalar,      // portable C++, every target
    kAvx2,        // vpmaddubsw + vpmaddwd
    kAvxVnni,     // vpdpbusd, VEX 256-bit
    kAvx512Vnni,  // vpdpbusd, EVEX 256-bit (AVX-512 VNNI + VL)
    kNeonDot,     // sdot (compiled only with __ARM_FEATURE_DOTPROD)
};
const char* int8_variant_name(Int8Variant variant);
// The variants this machine runs, kScalar first, the best last.
std::vector<Int8Variant> int8_variants_available();
// `requested`, or the best available when it is kAuto or this machine cannot run it.
Int8Variant int8_resolve_variant(Int8Variant requested);
// Whether `gemv_rows_int8` takes w (MLX affine 4 or 8 bits, group a multiple of 32, F32/F16/
// BF16 scales).
bool int8_kernel_supports(const WeightMatrix& w);
// Bytes past n * cols of xq that the kernels may read (and multiply by zero codes).
inline constexpr std::int64_t kInt8ActivationPadding = 64;
struct Int8Activations {
    const std::int8_t* xq = nullptr;     // [n, cols] in the kernels' layout (matmul_int8.hpp)
    const float* step = nullptr;         // [n, n_groups]: x ≈ xq * step
    const float* sum = nullptr;          // [n, n_groups]: f32 sums of the unrounded x
    const std::int32_t* qsum = nullptr;  // [n, n_groups]: Σ xq of each group
    std::int64_t prefetch_bytes = 0;     // software prefetch distance in the codes; 0 = none
};
// Quantizes groups [begin, end) of x[n, w.cols] (group i = token i / n_groups, group
// i % n_groups) for `gemv_rows_int8` with w's bits and group size.
void quantize_activations_int8(const WeightMatrix& w, const float* x, std::int64_t begin,
                               std::int64_t end, std::int8_t* xq, float* step, float* sum,
                               std::int32_t* qsum);
// As `gemv_rows` for a w that `int8_kernel_supports`, from int8 activations, any n; `variant`
// goes through int8_resolve_variant.
void gemv_rows_int8(Int8Variant variant, const WeightMatrix& w, const Int8Activations& xa,
                    std::int64_t n, std::int64_t row_begin, std::int64_t row_end,
                    const WeightVector* bias, float* y, std::int64_t ldy);

// out[(r - row_begin) * w.cols + c] = W[r, c] as f32, for r in [row_begin, row_end).
void dequantize_rows(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                     float* out);

// y[i, :] = x[i, :] * inv_rms(x[i, :]) * weight for rows [row_begin, row_end) of width d.
void rms_norm_rows(const float* x, const WeightVector& weight, std::int64_t row_begin,
                   std::int64_t row_end, std::int64_t d, float eps, float* y);

// out[i] = silu(gate[i]) * up[i] for i in [begin, end).
void silu_mul_range(const float* gate, const float* up, std::int64_t begin, std::int64_t end,
                    float* out);
// out[i] = a[i] + b[i] for i in [begin, end).
void add_range(const float* a, const float* b, std::int64_t begin, std::int64_t end, float* out);
// out[i] = x[i] as binary16 for i in [begin, end), as f32_to_f16_saturated (round to nearest
// even, magnitudes past 65504 to ±65504).
void store_f16_range(const float* x, std::int64_t begin, std::int64_t end, std::uint16_t* out);

// One attention work item: query rows of the KV heads [kv_head_begin, kv_head_end) against
// keys [key_begin, key_end). Rows are (KV head) x (query i in [q_begin, q_end)) x (head h in
// the KV head's group), in that order; row `j` keeps its running max in m[j], its softmax
// denominator in l[j] and its unnormalised output in acc[j * head_dim ...]. These are partial
// results: the caller merges tiles that split the keys. Decode tiles cover every KV head of a
// key range, so a thread streams one contiguous part of the cache. key_begin is a multiple of
// kAttentionSplitAlign: tiled keys are read a whole tile at a time.
struct AttentionTile {
    std::int64_t kv_head_begin = 0, kv_head_end = 0;
    std::int64_t q_begin = 0, q_end = 0;
    std::int64_t key_begin = 0, key_end = 0;
    std::int64_t n_rows(std::int64_t group) const {
        return (kv_head_end - kv_head_begin) * (q_end - q_begin) * group;
    }
};
// `scores` holds at least attention_scratch_floats(head_dim) floats.
inline constexpr std::int64_t kAttentionKeyBlock = 64;
// Key splits of a long context start on multiples of this many keys (whole key tiles).
inline constexpr std::int64_t kAttentionSplitAlign = kKeyTile;
// Scores of a key block for up to 8 query rows at once (the heads of a GQA group).
inline constexpr std::int64_t kAttentionScoreFloats = 8 * kAttentionKeyBlock;
// The scores plus, for f16 keys in rows, one key block of K widened to f32.
inline constexpr std::int64_t attention_scratch_floats(std::int64_t head_dim) {
    return kAttentionScoreFloats + kAttentionKeyBlock * head_dim;
}
// What an attention tile asks the memory for ahead of its loads (CpuTuning's attention
// prefetch knobs).
struct AttentionPrefetch {
    // A decode tile asks for the next KV head's rows while it computes one.
    bool next_head = true;
    // Every line of K and V that a tile loads also asks for the line this many keys further
    // on in the same cache, into L2 (0: not at all).
    std::int64_t stream_keys = 0;
};
void attention_tile(const AttentionArgs& args, const AttentionTile& tile, float* m, float* l,
                    float* acc, float* scores, const AttentionPrefetch& prefetch = {});
// out[i] = e^x[i] for x[i] <= 0 as attention's softmax computes it (whole vectors; the tail with
// std::exp): within about 1 ulp, and e^-87 (~1.6e-38) for arguments below -87.
void softmax_exp(const float* x, std::int64_t n, float* out);

}  // namespace brigade::model::cpu
