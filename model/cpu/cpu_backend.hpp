#pragma once
// The optimized CPU backend: Highway SIMD kernels (kernels.hpp), a persistent thread pool and
// BLAS sgemm on dequantized weight panels for prompt processing. Numbers agree with the
// reference backend to f32 rounding (tests/unit/cpu).

#include <array>
#include <memory>
#include <vector>

#include "model/backend.hpp"
#include "model/cpu/aligned_vector.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/thread_pool.hpp"

namespace brigade::model::cpu {

// Whether CPUID names AMD (false off x86).
bool cpu_vendor_is_amd();
// CpuTuning::next_tile_prefetch_row_bytes for this CPU: 2048 on AMD x86 CPUs, 0 elsewhere.
std::int64_t default_next_tile_prefetch_row_bytes();
// CpuTuning::grouped_max_tokens 0 stands for this: 16 on AMD CPUs whose kernels run AVX-512
// (grouped_token_tiles_available, which `--isa` holds back), else 8.
std::int64_t default_grouped_max_tokens();
// CpuTuning::plain_tiles_max_tokens 0 stands for this: the same rule, 16 on AMD CPUs whose
// kernels run AVX-512, else 8.
std::int64_t default_plain_tiles_max_tokens();

// Knobs that tests and benchmarks turn; the defaults are what `make_backend` uses.
struct CpuTuning {
    // From this many tokens on, matmul dequantizes panels of weight rows to f32 and runs sgemm
    // on them; below it the fused decode kernels run (weights are read once either way).
    // (Measured on a 16-core Xeon: at 16 tokens the decode kernels beat dequantize + sgemm
    // panels by 1.4-1.5x, kernels_bench "decode x16".)
    std::int64_t gemm_min_tokens = 32;
    // Use BLAS for those panels when the build has it (false: the Highway kernels).
    bool use_blas = true;
    // At most this many weight rows per prompt-processing panel (f32 scratch per thread is
    // panel_rows * cols * 4 bytes).
    std::int64_t max_panel_rows = 256;
    // Quantized weights at decode of 1-4 tokens multiply int16-quantized activations with
    // integer dot products (matmul_int16.cpp; relative error ~1e-5). false: f32 throughout.
    bool int16_activations = true;
    // 4- and 8-bit weights at decode of 1-4 tokens round activations to int8 per weight group
    // and use integer dot products (matmul_int8.cpp; takes precedence over int16_activations).
    // Off by default: the rounding moves an output by up to step/2 · Σ|scale·q| per group
    // (step = max|x_g| / 127), beyond the Hugging Face parity tolerance
    // (BackendOptions::cpu_int8_activations has the measured effect).
    bool int8_activations = false;
    // Which instruction set the int8 path uses (tests and benches force each; kAuto = best).
    Int8Variant int8_variant = Int8Variant::kAuto;
    // Otherwise, on x86 with AVX2 (VNNI or not) or Arm with sdot, 4-bit weights (and 8-bit ones
    // with AVX-512 VNNI or AVX-VNNI) at decode of one or two tokens split each activation into two
    // int8 digits (matmul_split_int8.cpp; within 3.1e-5 · max|x_g| of x) and use integer dot
    // products. false: the f32 kernels.
    bool split_int8_activations = true;
    // A decode's split-int8 digits are made on the calling thread below this many activations
    // (tokens x columns), else on the pool (cpu_backend.cpp, prepare_decode, says why).
    std::int64_t split_int8_prepare_serial_below = 8192;
    // Decodes of up to this many tokens on 4-bit weights take the split-int8 kernel, one token
    // after another over each chunk of rows (the later ones read the codes from cache; each
    // token gets the floats it gets alone). Above it: AMX tiles or the f32 kernels, which decode
    // each code once for all tokens. 2 sequences on the lent Xeon (session 22, run 90, paired
    // steps): Qwen2.5-0.5B 4-bit +14%, Llama-3.2-1B 4-bit +5% against the f32 kernels (AMX
    // tiles from 2 tokens: +7% and +3%), and +8-9% and +1-13% as the default (run 91); 2
    // sequences had decoded only 1.03-1.12x one sequence's tok/s. (4 tokens this way lost to the
    // f32 kernels on a 2-core Sapphire Rapids: 48-49 against 67-68 tok/s, Llama-3.2-1B 4-bit.)
    std::int64_t split_int8_max_tokens = 2;
    // A batch of up to this many decode steps (Backend::set_rows_are_decode_steps) on 4-bit
    // weights takes the split-int8 kernel too where the AMX tiles do not take it (CPUs without
    // AMX) and the kernel is AVX-512's, two tokens a pass (four since split_int8_four): the f32
    // kernels' arithmetic bounds 4-bit batches there. A 2-vCPU Zen 4, paired steps against the
    // f32 kernels (with pairs): 3-4 sequences
    // 27-52% faster, 5-8 21-37%, 12-16 19-36%, 24-31 12-37% (Qwen2.5-0.5B and Llama-3.2-1B),
    // so every decode batch below gemm_min_tokens (8-bit ones: split_int8_decode_8bit). The
    // 256-bit kernels: split_int8_decode_max_tokens_256, Arm's: split_int8_decode_max_tokens_neon.
    // Prompt rows keep f32 activations.
    std::int64_t split_int8_decode_max_tokens = 31;
    // The same for the 256-bit kernels (AVX2, AVX-VNNI), which take three or four tokens in
    // one pass. Against the f32 register tiles on the lent Xeon held to them (session 30, run
    // 146, paired steps): 3 sequences 7-8% (Qwen2.5-0.5B) and 46-47% (Llama-3.2-1B) faster
    // with AVX2, 17-22% and 67-72% with AVX-VNNI; 4 sequences 2-3% and 36-40%, 7-14% and
    // 56-57%. Beyond four the shapes had pulled apart (runs 145, 147: Qwen2.5-0.5B 5-16
    // sequences 12-24% slower) until the group factors lost their scalar tail (session 31,
    // Qwen's rows have 14 groups): then (run 152, B = up to 16 against A = up to 4) with AVX-VNNI
    // 6, 8 and 16 sequences of 4-bit Qwen 14-17% and Llama 13-43% faster, 8-bit 0-10% and
    // 9-38%; with AVX2 4-bit 1-7% and 3-30%. So up to 16; 17 and more keep the tiles.
    std::int64_t split_int8_decode_max_tokens_256 = 16;
    // The same for Arm's sdot kernel, which has the same 1-4 token passes. No Arm machine was at
    // hand to time it; under qemu (session 31, kernel_calls_bench --tokens, one thread, 4-bit
    // g64) batches executed this share of the f32 kernels' instructions: 3 tokens 0.50, 4
    // 0.55-0.57, 8 0.80-0.87, 16 0.70-0.77 (896 x 896, 2048 x 2048), and Apple's cores issue
    // sdot and fmla alike; on the x86 stand-ins the same limit won in time. So up to 16, like
    // the 256-bit kernels; `engine_bench --ab split-int8-decode-max-tokens-neon=N` on an Arm
    // machine measures other limits.
    std::int64_t split_int8_decode_max_tokens_neon = 16;
    // ... and 8-bit ones too. With pairs, 8-bit batches of 3-4 had moved by -6% to +14% against
    // the f32 kernels (session 28), so 8-bit stayed out; four tokens a pass (split_int8_four)
    // changed that: on a 2-vCPU Zen 4 (session 29, paired steps) 8-bit batches of 3 decoded
    // 18-31% faster, 4 34-37%, 8 5-15%, 16 7-15%.
    bool split_int8_decode_8bit = true;
    // Two tokens through one kernel call where the kernel has a two-token form (AVX-512,
    // AVX-VNNI and AVX2: each chunk's codes unpacked once for both, gemv_rows_split_int8_pair;
    // at 256 bits 11-23% faster for 2 sequences than one token after the other, session 30);
    // false: one token after the other. The same floats either way.
    bool split_int8_pair = true;
    // Before pairs, four tokens in one pass (a last three in one too) where the kernel has
    // such a pass (AVX-512): each chunk's codes unpacked once for all of them. On a 2-vCPU
    // Zen 4 (session 29, paired steps against pairs): 4-bit batches of 3 12-19% faster, 4
    // 5-11%, 7-8 7-13%, 16 3-10%; one sequence level. false: pairs, then one.
    bool split_int8_four = true;
    // Which instruction set the split-int8 path uses (tests and benches force each; kAuto =
    // best).
    SplitInt8Variant split_int8_variant = SplitInt8Variant::kAuto;
    // Decode of amx_min_tokens or more tokens goes through AMX tiles where the CPU has them:
    // with split_int8_activations, 4- and 8-bit weights (AMX-INT8, matmul_amx.cpp; the same
    // digits); BF16 weights (AMX-BF16, matmul_amx_bf16.cpp; three bf16 terms per activation).
    bool amx = true;
    // 4-bit weights from 3 tokens: batches of 3 decoded 17-25% faster through the tiles than
    // through the f32 kernels, 2 tokens 1-6% slower (2-core Sapphire Rapids here; the lent
    // 16-vCPU Xeon, run 47: 3 tokens 17-19% faster). With the block prefetch below, 2 tokens
    // through the tiles were 16-34% faster here but 5-6% slower on the lent Xeon (run 72,
    // --ab amx-min-tokens=3: B / A 1.051, 1.059), so 2 tokens stay on the f32 kernels. Since
    // AVX-512's split-int8 kernel takes three tokens in one pass (session 29), batches of 3
    // decode steps are faster there than in the tiles: on the lent Xeon (session 31, runs
    // 148-149, paired steps, B = AMX from 4 tokens) 4-bit 3 sequences 10-18% faster and 8-bit
    // 8-14% (one case of twelve 5% slower); 4 sequences stay (AMX 7-9% ahead on 4-bit). So
    // from 4 (a prompt of 3 tokens takes the f32 kernels).
    std::int64_t amx_min_tokens = 4;
    // Decode steps on 8-bit weights from this many (prompts from amx_min_tokens). Since
    // AVX-512's split-int8 pass takes 4 tokens at once and 8-bit rows (session 29), 4 decode
    // steps are faster there than in the tiles: on the lent Xeon (session 32, runs 162-164,
    // paired steps, Qwen2.5-0.5B and Llama-3.2-1B) 0-6% faster in 11 of 12 pairs, one 0.6%
    // slower; 5 steps 0.5-6% and 6 11-17% slower than the tiles, so from 5.
    // (Before the pass, 3 tokens had been 5-11% faster in the tiles, runs 72-73.)
    std::int64_t amx_8bit_min_tokens = 5;
    // A batch of decode steps (Backend::set_rows_are_decode_steps) splits its activations for
    // the AMX tiles into two int8 digits (split_int8::kGemvDigits, within 3.1e-5 · max|x_g|, the
    // one- and two-token GEMV's precision) instead of four: 16 / 2 = 8 tokens share a narrow
    // block's B tile and a wide block multiplies and folds two digit tiles instead of four.
    // Prompt tokens keep four digits. On the lent 16-vCPU Xeon (run 118, paired steps) 8 and 16
    // sequences decoded 33-50% faster on 4-bit weights and 17-32% on 8-bit ones; 3-4 (one narrow
    // block either way) level. false: four digits throughout.
    bool amx_decode_two_digits = true;
    // A batch of 3-4 decode steps (two digits: 8 of a narrow block's 16 columns) multiplies two
    // weight groups into one C tile, the first group's digits in the even columns and the
    // second's in the odd ones, so that one fold of 16 rows (the kernel's vector cost, with the
    // codes' unpacking) serves two groups: half the fold's arithmetic per group. Groups of 32 and
    // 64 with an even count per row; others, and larger batches, one group per tile.
    bool amx_pair_groups = true;
    // ... and on 4-bit weights the pair's two tiles split by nibble rather than by group, so that
    // one load of a row's code bytes for the pair gives both A tiles (3 instructions a row for
    // two groups, against 2 a row for each group split apart).
    bool amx_pair_nibbles = true;
    // BF16 weights from this many tokens: at 8 the f32 kernels, near the bandwidth bound there,
    // were ahead for Qwen2.5-0.5B (lent Xeon, run 44: 430 against 367 tok/s).
    std::int64_t amx_bf16_min_tokens = 12;
    // ... and from amx_bf16_large_min_tokens on matrices with amx_bf16_large_side rows and
    // columns or more: the tiles pay a preparation per call (the activations' bf16 terms, per
    // column) and, below 16 tokens, a half-empty block, which large matrices amortize. Paired
    // steps on the lent Xeon: AMX-BF16 from 5 tokens everywhere (run 124) made Llama-3.2-1B's 8
    // sequences 21-23% faster and Qwen2.5-0.5B's 24-26% slower (5 sequences slower for both);
    // from 8 on rows of 2048 columns or more (run 125) Llama 8 sequences +21-25% and 10 +42-43%,
    // Qwen (only its 896 x 4864 down_proj) 7-8% slower. Hence both sides.
    std::int64_t amx_bf16_large_min_tokens = 8;
    std::int64_t amx_bf16_large_side = 2048;
    // An AMX decode's activations (split into digits and laid out as B tiles, ~4 µs for 4
    // tokens of 896 columns here) are prepared on the calling thread below this many elements
    // (tokens x columns), else on the pool, before the matmul's own parallel region. At 8192,
    // 4-8 tokens of Qwen2.5-0.5B's and Llama-3.2-1B's 896- and 2048-column matrices were
    // prepared on one thread; on the pool, paired steps on the lent Xeon (run 70) decoded 8
    // sequences of Qwen2.5-0.5B 4-bit 10% faster (B / A 1.103 against 1.016 for two equal
    // settings), 8-bit 3% (1.056 / 1.022); the other batches of 4 and 8 moved within the
    // harness's spread. (Each group's digits are the same either way.)
    std::int64_t amx_prepare_serial_below = 2048;
    // AMX decode streams each 16-row block's codes from memory with the next block's lines
    // prefetched while the block is multiplied, a block's worth spread over its groups (false:
    // prefetch_bytes ahead in each of the 16 rows, which for rows shorter than that lands in
    // lines the block reads anyway). Here (2-core Sapphire Rapids, weights from DRAM, 4864x896
    // 4-bit): 4 tokens 250-276 -> 197-212 µs, 8 tokens 376 -> 288 µs, 16 tokens 544-567 ->
    // 461-474 µs. The lent 16-vCPU Xeon (runs 72-73, --ab amx-block-prefetch, B = per row,
    // three rounds): B / A 0.83-0.98 for every 4- and 8-bit batch of 3-16 sequences of
    // Qwen2.5-0.5B and Llama-3.2-1B, i.e. 2-20% faster this way.
    bool amx_prefetch_next_block = true;
    // With amx, prompts (gemm_min_tokens or more) on those weights go through the same tiles,
    // kAmxPrefillTokens at a time, instead of dequantized panels and sgemm.
    bool amx_prefill = true;
    // Otherwise, 4- and 8-bit weights at decode use the per-group factored f32 kernel
    // (matmul_grouped.cpp); false: the plain fused kernel of matmul.cpp.
    bool grouped_quant = true;
    // With it, decodes of up to this many tokens (where AMX does not take them) go through the
    // grouped kernels: one row and up to 4 tokens at a time, and batches of 5 and more in tiles
    // of up to 8 tokens (AVX-512: 2 rows; other targets: 1 or 2, matmul_grouped.cpp), each
    // code decoded in registers once per pass; larger batches dequantize each row to f32 for
    // matmul.cpp's dot tiles (or its token vectors). Before session 25 that limit was 4, and 5
    // sequences decoded slower than 4. Paired steps, B = the limit at 4 (`--ab
    // grouped-max-tokens=4`), B / A:
    //  - a 2-vCPU Zen 4: x5 0.58-0.62, x8 0.69-0.81 (AVX-512); x5 0.64-0.76, x8 0.76-0.95 with
    //    the kernels held to AVX2;
    //  - the lent 16-vCPU Xeon held to AVX-512 (run 102): x5 0.61-0.83, x8 0.81-1.01; held to
    //    AVX2 (run 104): x5 0.74-0.96, x8 0.86-1.04.
    // Beyond 8 the tiles pass over the codes once per 8 tokens, the dot tiles once per row:
    // on the Xeon (AVX-512, tiles up to 16 against 8, run 104) x12 0.88-0.98 and x16 0.81-0.90
    // for the tiles, on Zen 4 the tiles ahead (x9 1.14-1.28, x12 1.07-1.21); one row at a time
    // (AVX2) lost from 12 tokens on (x16 0.66-0.74). 0: 16 on AMD CPUs whose kernels run AVX-512,
    // else 8.
    std::int64_t grouped_max_tokens = 0;
    // BF16 and F16 rows at decode of 5 up to this many tokens (where AMX does not take them)
    // go through gemv_rows_plain_tiles: 2 rows x up to 8 tokens (4 on 16-register targets)
    // widened in registers, instead of rows widened to f32 in memory for the dot tiles, 4
    // tokens a pass, which made 5 sequences slower than 4. Paired steps, B = the dot tiles
    // (`--ab plain-tiles-max-tokens=4`), B / A: a 2-vCPU Zen 4 x5 0.66-0.70, x8 0.69-0.84
    // (AVX2: 0.72-0.74); the lent Xeon (run 105, BF16 AMX only from 12 tokens) x5 0.81-0.82,
    // x8 0.87-1.00, held to AVX-512 0.80-0.82 and 0.88-1.00. Beyond 8 the tiles pass over
    // the rows once per 8 tokens, the dot tiles widen each row once: on Zen 4 (AVX-512, up to
    // 16 against 8, session 26) Qwen2.5-0.5B x9 1.36, x12 1.29, x16 1.16-1.21, Llama-3.2-1B
    // x9 1.18, x12 1.07, x16 1.01; held to AVX2 (4-token tiles) 0.99-1.00. 0: 16 on AMD CPUs
    // whose kernels run AVX-512, else 8.
    std::int64_t plain_tiles_max_tokens = 0;
    // Software prefetch distance (bytes ahead in the weight stream) of the decode kernels
    // (grouped and plain-dtype rows); 0: none. Measured on a 16-core Xeon (kernels_bench,
    // bench/RESULTS.md): 2 KiB beat 1 KiB and none in 17 of 18 decode cases, by 10-30%. The
    // one-token grouped tiles, reading several rows at once, use half of it per row.
    std::int64_t prefetch_bytes = 2048;
    // Row tiles of rows up to this many bytes prefetch the next tile's rows as one sequential
    // stream instead of prefetch_bytes ahead in each row (TilePrefetch); 0: never. On an AMD
    // Zen 4 (2 vCPUs, weights from memory) the per-row streams of short rows read at about half
    // the speed of one row at a time: kernels_bench 8-bit q/o, gate/up and lm_head of
    // Qwen2.5-0.5B and Llama-3.2-1B 17-21 -> 25-36 GB/s, 4-bit 18-23 -> 21-29; one sequence
    // decoded 14-41% faster (engine_bench --ab, two rounds). Rows of 2.4 KiB and more were
    // slower this way (down: 25 -> 21 GB/s), hence the limit. On the lent Sapphire Rapids Xeons
    // paired steps were 1-4% slower with it (run 96), so the default is on for AMD only
    // (bench/RESULTS.md, session 23).
    std::int64_t next_tile_prefetch_row_bytes = default_next_tile_prefetch_row_bytes();
    // AVX-512: 4-bit decode rows go through a per-group lookup table (matmul_grouped.cpp).
    bool q4_lookup = true;
    // The grouped kernels (lookup or not) take 2-4 rows per pass for one token, sharing each x
    // load; false: one row at a time.
    bool grouped_multi_row = true;
    // Decode of this many tokens or more (up to gemm_min_tokens) puts the tokens along the
    // vector (gemv_rows_batched: x transposed, each weight broadcast into R x TV token
    // vectors); fewer take tiles of 2-4 rows x 4 tokens with the columns along the vector
    // (gemv_rows), which stream the activations from L2 once per row tile and reduce every
    // output across lanes. 0: the target's default (batched_min_tokens: AVX2 from 9 tokens,
    // where it measured faster; off elsewhere).
    std::int64_t batched_min_tokens = 0;
    // A context is split over several attention tiles once each still has this many keys
    // (per KV head; divided by the KV heads of a decode tile when
    // attention_fewer_heads_per_tile is off). Measured in the engine on a 16-core Xeon
    // VM (engine_bench --attention-min-keys, bench/RESULTS.md session 4): 64 instead of 256
    // halved Qwen2.5-0.5B's decode attention at ~530 positions (47 -> 20-23 µs per layer: 4
    // splits became 16); Llama-3.2-1B (8 KV heads per tile) was unchanged.
    std::int64_t min_keys_per_split = 64;
    // A decode tile covers every KV head of its key range while the context gives enough
    // splits of min_keys_per_split keys (per head) for about two tasks per thread; below that
    // it covers half the heads, a quarter, ..., instead of splitting the keys finer. A split of
    // fewer than 64 keys (one key block) scores them one vector at a time, four FMA chains for
    // Llama-3.2-1B's four query rows, each waiting on its last FMA: at 512 positions the 32
    // splits of 16 keys x 8 heads took 73-81 µs on one thread here against 42-44 for tiles of
    // 2 or 4 heads x 64 keys; on the lent Xeon (16 threads) 25 µs a call against 36-51, and one
    // sequence decoded 1-5% faster in paired steps (bench/RESULTS.md, session 22). Off:
    // every head in each decode tile, splits of min_keys_per_split / heads keys (16 at least).
    bool attention_fewer_heads_per_tile = true;
    // A decode context is split into about two tiles per thread (claimed dynamically), and
    // into up to this many per thread while each split keeps min_keys_per_long_split keys: a
    // thread slowed by its hyperthread sibling then holds up the step by a smaller share.
    // Measured on the lent 16-vCPU Xeons (bench/RESULTS.md, session 19, engine_bench --ab,
    // q4, three rounds each), 4 against 2 per thread: 32k positions +7-13% (Qwen2.5-0.5B) and
    // +4-11% (Llama-3.2-1B), 8k +4-6% in run 55; with splits of 32-64 keys (2k-4k) Qwen was
    // 2-5% slower (run 56), hence the minimum; 8 per thread gained no more at 32k and lost at
    // 8k. This rule against 2 per thread on another machine (run 57): 32k +1-9% in 5 of 6,
    // 2k-8k within the spread.
    std::int64_t long_context_splits_per_thread = 4;
    std::int64_t min_keys_per_long_split = 128;
    // A decode attention tile asks for the next KV head's rows (values; keys in rows too)
    // while it computes one (session 8: the strided rows of Llama-3.2-1B's 8 heads). Off, 32k
    // decode was 10-15% slower on the lent Xeon (session 19, run 61).
    bool attention_prefetch_heads = true;
    // A decode attention tile asks, for every line of K and V it loads, for the line this many
    // keys further on, into L2 (AttentionPrefetch::stream_keys; 0: off; keys in rows, as the
    // opt-in f32 cache keeps them, are left to the hardware). Measured in the
    // engine on the lent 16-vCPU Xeons (engine_bench --formats q4 --ab, bench/RESULTS.md
    // session 41), off against 64: Qwen2.5-0.5B 0.88 at 32k positions and 0.96 at 8k,
    // Llama-3.2-1B 0.93 and 0.99; 32 within 1.5% of 64; 128 (128 KB ahead for Llama's 8 KV
    // heads) 0.90-0.97. Asking for whole blocks at once measured slower (sessions 15, 38).
    std::int64_t attention_stream_prefetch_keys = 64;
    // A decode matmul (or fused op) is cut into up to this many chunks per thread, claimed
    // dynamically. Small chunks let the threads finish together: on a 16-vCPU VM whose vCPUs
    // are hyperthread pairs, a thread runs at half speed while its sibling works, and the last
    // chunk decided the time of a small matrix. Measured there against 4 chunks per thread of
    // at least 16 rows (run 41, three alternated rounds, with run 40's two): Qwen2.5-0.5B
    // 4-bit one sequence faster in 5 of 5, by 3-9%, and 4 sequences in 6 of 6, by 7-20%;
    // Llama-3.2-1B within the noise.
    std::int64_t max_chunks_per_thread = 8;
};

class CpuBackend final : public Backend {
public:
    CpuBackend(const BackendOptions& options, const CpuTuning& tuning);

    std::string_view name() const override { return "cpu"; }
    BackendKind kind() const override { return BackendKind::kCpu; }
    bool supports(const WeightMatrix& w) const override;
    int compute_threads() const override { return pool_.size(); }
    const CpuTuning& tuning() const { return tuning_; }
    // Takes effect from the next op: benches flip a knob between decode steps to compare the
    // two settings under the same machine conditions (engine_bench --ab).
    void set_tuning(const CpuTuning& tuning) { tuning_ = tuning; }
    // Fork-joins of the thread pool so far (ThreadPool::n_dispatches).
    std::uint64_t n_dispatches() const { return pool_.n_dispatches(); }

    DeviceBuffer alloc(std::size_t bytes) override;
    WeightMatrix upload(const WeightMatrix& host) override { return host; }
    WeightVector upload(const WeightVector& host) override { return host; }
    void write(DeviceBuffer& dst, std::size_t offset_bytes, const void* src,
               std::size_t bytes) override;
    void read(const DeviceBuffer& src, std::size_t offset_bytes, void* dst,
              std::size_t bytes) override;
    void store_as(const float* src, std::int64_t n, DType dtype, DeviceBuffer& dst,
                  std::size_t offset_bytes) override;
    void store_key_tiles(const float* src, std::int64_t n_rows, std::int64_t row_len,
                         std::int64_t pos0, DType dtype, DeviceBuffer& dst,
                         std::size_t offset_bytes) override;
    void synchronize() override {}
    // On the pool (the caller included), one task per claim.
    void run_host_tasks(std::int64_t n, void (*task)(void* ctx, std::int64_t i),
                        void* ctx) override {
        pool_.parallel_for(n, [&](std::int64_t i, int) { task(ctx, i); });
    }

    void matmul(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                const WeightVector* bias = nullptr) override;
    void embed(const WeightMatrix& table, std::span<const std::int32_t> ids, float* out) override;
    void rms_norm(const float* x, const WeightVector& weight, std::int64_t n, std::int64_t d,
                  float eps, float* y) override;
    void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
              const std::int32_t* positions, std::span<const float> inv_freq,
              float attention_scaling) override;
    void attention(const AttentionArgs& args) override;
    // Every sequence's tiles in one parallel region, merges in a second
    // (cpu_backend_attention.cpp).
    void attention_many(std::span<const AttentionArgs> batch) override;
    void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) override;
    void add(const float* a, const float* b, std::int64_t n, float* out) override;

    // Decode (n < gemm_min_tokens): one fork-join over the rows of all jobs
    // (cpu_backend_fused.cpp).
    void matmul_many(std::span<const MatmulJob> jobs, const float* x, std::int64_t n) override;
    void gated_mlp_up(const WeightMatrix& gate, const WeightVector* b_gate, const WeightMatrix& up,
                      const WeightVector* b_up, const float* x, std::int64_t n, float* out,
                      float* up_scratch) override;
    void matmul_add(const WeightMatrix& w, const float* a, std::int64_t n, const WeightVector* bias,
                    float* residual, float* scratch) override;
    void set_rows_are_decode_steps(bool decode_steps) override { decode_steps_ = decode_steps; }

private:
    // The pool's size: `requested` where the user gave one, else default_thread_count's.
    static int pool_threads(int requested);
    // The activations of one decode matmul as its kernel takes them, prepared once per call
    // (and shared by the matrices of a fused op that take the same preparation).
    struct DecodeInput {
        enum class Kernel { kPlain, kInt16, kGrouped, kInt8, kSplitInt8, kBatched, kAmx, kAmxBf16 };
        Kernel kernel = Kernel::kPlain;
        int bits = 0, group_size = 0;  // what the preparation depended on
        Int16Activations int16;
        GroupedActivations grouped;
        Int8Activations int8;
        SplitInt8Activations split;
        AmxActivations amx;
        const std::uint16_t* amx_bf16 = nullptr;  // kAmxBf16: the activations' bf16 terms
        const float* xt = nullptr;                // kBatched: x transposed (transpose_tokens)
    };
    // Buffers of one prepared input.
    struct DecodeScratch {
        AlignedVector<std::int16_t> xq;              // int16 activations
        AlignedVector<float> xq_step, xq_sum;        // [n, n_groups] their steps and group sums
        AlignedVector<float> xg, xg_sum;             // grouped-kernel activations and group sums
        AlignedVector<std::int8_t> x8;               // int8 activations (opt-in)
        AlignedVector<float> x8_step, x8_sum;        // [n, n_groups] their steps and f32 group sums
        AlignedVector<std::int32_t> x8_qsum;         // [n, n_groups] Σ xq per group
        AlignedVector<float> xt;                     // batched decode: x transposed
        AlignedVector<std::int8_t> digits;           // split-int8 activations
        AlignedVector<float> digit_unit, digit_sum;  // [n, n_groups] their units and group sums
        AlignedVector<std::int8_t> amx_tiles;        // AMX: the digits as B tiles
        AlignedVector<float> amx_unit, amx_sum;      // [token blocks, n_groups, 16]
        AlignedVector<std::uint16_t> amx_bf16_tiles;  // AMX-BF16: the activations' terms
    };
    // A matrix of a fused decode op: rows [0, w.rows) into y, then the epilogue on each task's
    // rows. `paired` (gated MLP): the up matrix, same rows, into y2; then
    // y = silu(y) * y2 on those rows. `residual`: residual += y on those rows.
    struct DecodeJob {
        const WeightMatrix* w = nullptr;
        float* y = nullptr;
        const WeightVector* bias = nullptr;
        const DecodeInput* in = nullptr;
        const WeightMatrix* paired = nullptr;
        float* y2 = nullptr;
        const WeightVector* bias2 = nullptr;
        const DecodeInput* in2 = nullptr;
        float* residual = nullptr;
    };
    static constexpr std::size_t kMaxDecodeJobs = 4;

    // y = x·Wᵀ (+ bias) as one job of the fused decode path; with `residual`, then
    // residual += y on each task's rows (matmul_add).
    void matmul_decode(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                       const WeightVector* bias, float* residual = nullptr);
    // Prepares x[n, w.cols] for w's decode kernel into `s`.
    DecodeInput prepare_decode(const WeightMatrix& w, const float* x, std::int64_t n,
                               DecodeScratch& s);
    // Which kernel x[n, w.cols] takes for w, with `s` sized for its preparation (prepare_decode
    // then fills it).
    DecodeInput plan_decode(const WeightMatrix& w, const float* x, std::int64_t n,
                            DecodeScratch& s);
    // Whether `in` is prepared group by group (prepare_groups), so that any split of the groups
    // gives the same bytes.
    static bool prepared_by_groups(const DecodeInput& in);
    // Prepares groups [begin, end) of x (group i: token i / n_groups, group i % n_groups of w)
    // into `s` for `in`, a plan_decode result that is prepared_by_groups.
    void prepare_groups(const WeightMatrix& w, const DecodeInput& in, const float* x,
                        std::int64_t begin, std::int64_t end, DecodeScratch& s) const;
    // y rows [row_begin, row_end) of w·x from prepared activations, on pool thread `thread`.
    void decode_rows(const WeightMatrix& w, const DecodeInput& in, const float* x, std::int64_t n,
                     std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                     float* y, int thread);
    // Runs the jobs in one parallel region: their rows concatenated, split into chunks of
    // equal weight bytes on boundaries that are multiples of 4 rows of a job (so every row
    // takes the same kernel path, bit for bit, however the rows are split).
    void run_decode_jobs(std::span<const DecodeJob> jobs, const float* x, std::int64_t n);
    // Prepares one input per distinct kernel preparation among `matrices` (null entries
    // skipped); returns for each matrix the input it takes.
    void prepare_decode_inputs(std::span<const WeightMatrix* const> matrices, const float* x,
                               std::int64_t n, std::span<const DecodeInput*> out);
    // Tokens per AMX prompt chunk (two 16-token tiles).
    static constexpr std::int64_t kAmxPrefillTokens = 32;
    bool amx_prefill(const WeightMatrix& w) const;
    void matmul_prefill(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                        const WeightVector* bias);
    // Makes every thread's scratch hold at least `floats` floats (grows only, on this thread).
    void reserve_scratch(std::size_t floats);
    // Splits [0, count) into about 4 chunks per thread of at least `min_chunk` items and runs
    // f(begin, end, thread) on the pool.
    template <class F>
    void parallel_ranges(std::int64_t count, std::int64_t min_chunk, F&& f);
    // f(0, count) on this thread when `serial` (waking the pool would cost more than the work),
    // else f(begin, end) over parallel_ranges.
    template <class F>
    void serial_or_parallel(bool serial, std::int64_t count, std::int64_t min_chunk, F&& f);
    // Splits [0, count) into a multiple of the thread count of near-equal chunks (sizes differ
    // by at most one) of at least `min_chunk` items where possible, so that threads streaming
    // equal work finish together, and runs f(begin, end, thread) on the pool. (The decode
    // matmuls split rows with run_decode_jobs instead.)
    template <class F>
    void balanced_ranges(std::int64_t count, std::int64_t min_chunk, F&& f);

    CpuTuning tuning_;
    // set_rows_are_decode_steps: the rows of the ops now running are decode steps.
    bool decode_steps_ = false;
    ThreadPool pool_;
    std::vector<AlignedVector<float>> scratch_;  // [thread] kernel scratch
    std::vector<float> attention_partials_;      // split-K attention (m, l, acc) per tile row
    // How one sequence's attention is cut into tiles (query block x KV heads x key split).
    struct AttentionPlan {
        const AttentionArgs* args = nullptr;
        std::int64_t group = 1, q_block = 1, n_q_blocks = 1, heads_per_tile = 1;
        std::int64_t n_head_groups = 1, n_items = 1, n_splits = 1;
        std::int64_t tile_rows = 0, tile_floats = 0;  // m, l and acc of one tile
        // Rows per merge task, and merge tasks per item (when the keys are split).
        std::int64_t merge_rows = 1, merges_per_item = 0;
        // Where this sequence starts in attention_many's flattened tasks and merges, and its
        // split partials in attention_partials_.
        std::int64_t first_task = 0, first_merge = 0, partials = 0;
        AttentionTile tile(std::int64_t item, std::int64_t split) const;
        // Where tile row `row` goes in the output.
        float* out_row(const AttentionTile& tile, std::int64_t row) const;
        // Writes acc / l of the tile's rows into the output.
        void normalize(const AttentionTile& tile, const float* l, const float* acc) const;
        // Merges the splits of one item's rows [row_begin, row_end) and writes them out;
        // `work` holds head_dim floats.
        void merge(const float* partials, std::int64_t item, std::int64_t row_begin,
                   std::int64_t row_end, float* work) const;
    };
    AttentionPlan plan_attention(const AttentionArgs& a) const;
    std::vector<AttentionPlan> attention_plans_;  // attention_many's, reused
    // Prepared decode activations: one per distinct preparation of a fused op's matrices.
    std::array<DecodeScratch, kMaxDecodeJobs> decode_scratch_;
    std::array<DecodeInput, kMaxDecodeJobs> decode_inputs_;
    // Chunk boundaries of run_decode_jobs as (job, row) pairs; reused across calls.
    std::vector<std::int64_t> chunk_job_, chunk_row_;
    // The cos/sin of the last rope call: q and k of every layer of a step rotate by the same
    // positions, so the angles (a double cos and sin per pair, the bulk of rope's time for
    // short inputs) are computed once per step instead of twice per layer.
    struct RopeAngles {
        std::vector<std::int32_t> positions;
        std::vector<float> inv_freq;
        float scaling = 0.0f;
        std::vector<float> cos_sin;  // [token][cos of every pair, then sin of every pair]
    };
    RopeAngles rope_angles_;
    // Makes rope_angles_ hold the angles of these positions and frequencies.
    void prepare_rope_angles(std::span<const std::int32_t> positions,
                             std::span<const float> inv_freq, float attention_scaling);
};

// out[i] = silu(gate[i]) * up[i] for i in [begin, end), every element through the SIMD path
// (silu_mul_range takes a scalar path for the last partial vector), so an element's value does
// not depend on where a range starts or ends: the fused MLP splits rows differently from the
// plain silu_mul and must give the same floats.
void silu_mul_uniform(const float* gate, const float* up, std::int64_t begin, std::int64_t end,
                      float* out);

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options,
                                          const CpuTuning& tuning = {});

}  // namespace brigade::model::cpu
