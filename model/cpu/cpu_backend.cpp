#include "model/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu/blas_gemm.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_int8.hpp"  // BRIGADE_INT8_X86, CPUID
#include "model/cpu/reference_backend.hpp"
#include "model/cpu/thread_count.hpp"
#include "model/cpu/weight_decode.hpp"

namespace brigade::model::cpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Below this many elements an element-wise op runs on the calling thread: waking the pool
// costs more than the work.
constexpr std::int64_t kMinParallelElements = 1 << 15;

}  // namespace

bool cpu_vendor_is_amd() {
#if BRIGADE_INT8_X86
    // CPUID leaf 0 names the vendor in EBX, EDX, ECX; read once (in a VM CPUID traps).
    static const bool amd = [] {
        const int8_detail::Regs r = int8_detail::cpuid(0, 0);
        char vendor[13] = {};
        std::memcpy(vendor, &r.ebx, 4);
        std::memcpy(vendor + 4, &r.edx, 4);
        std::memcpy(vendor + 8, &r.ecx, 4);
        return std::strcmp(vendor, "AuthenticAMD") == 0;
    }();
    return amd;
#else
    return false;
#endif
}

std::int64_t default_next_tile_prefetch_row_bytes() { return cpu_vendor_is_amd() ? 2048 : 0; }

std::int64_t default_grouped_max_tokens() {
    return cpu_vendor_is_amd() && grouped_token_tiles_available() ? 16 : 8;
}

std::int64_t default_plain_tiles_max_tokens() { return default_grouped_max_tokens(); }

CpuBackend::CpuBackend(const BackendOptions& options, const CpuTuning& tuning)
    : tuning_(tuning), pool_(pool_threads(options.n_threads)) {
    scratch_.resize(static_cast<std::size_t>(pool_.size()));
    if (have_blas()) blas_single_threaded();
}

int CpuBackend::pool_threads(int requested) {
    return requested > 0 ? requested : default_thread_count().threads;
}

bool CpuBackend::supports(const WeightMatrix& w) const { return weight_format_supported(w); }

DeviceBuffer CpuBackend::alloc(std::size_t bytes) { return alloc_host_buffer(bytes); }

void CpuBackend::write(DeviceBuffer& dst, std::size_t offset_bytes, const void* src,
                       std::size_t bytes) {
    std::memcpy(static_cast<std::uint8_t*>(dst.data()) + offset_bytes, src, bytes);
}

void CpuBackend::read(const DeviceBuffer& src, std::size_t offset_bytes, void* dst,
                      std::size_t bytes) {
    const auto* from = static_cast<const std::uint8_t*>(src.data()) + offset_bytes;
    auto* to = static_cast<std::uint8_t*>(dst);
    // A step's logits (0.6 MB for one sequence of a 150k vocabulary, 9.7 MB for 16) were
    // written by every pool thread; one thread copying them out took 81 µs of a 4 ms decode
    // step and 1.2 ms of a 17 ms 16-sequence one on the lent Xeon (bench/RESULTS.md, session 20).
    constexpr std::int64_t kParallelBytes = 256 << 10;
    constexpr std::int64_t kChunkBytes = 32 << 10;
    const auto n = static_cast<std::int64_t>(bytes);
    serial_or_parallel(n < kParallelBytes || pool_.size() == 1, n, kChunkBytes,
                       [&](std::int64_t begin, std::int64_t end) {
                           std::memcpy(to + begin, from + begin,
                                       static_cast<std::size_t>(end - begin));
                       });
}

void CpuBackend::reserve_scratch(std::size_t floats) {
    for (auto& s : scratch_) {
        if (s.size() < floats) s.resize(floats);
    }
}

template <class F>
void CpuBackend::parallel_ranges(std::int64_t count, std::int64_t min_chunk, F&& f) {
    if (count <= 0) return;
    const std::int64_t chunk = std::max(min_chunk, ceil_div(count, 4 * pool_.size()));
    const std::int64_t n_tasks = ceil_div(count, chunk);
    pool_.parallel_for(n_tasks, [&](std::int64_t task, int thread) {
        const std::int64_t begin = task * chunk;
        f(begin, std::min(count, begin + chunk), thread);
    });
}

template <class F>
void CpuBackend::balanced_ranges(std::int64_t count, std::int64_t min_chunk, F&& f) {
    if (count <= 0) return;
    const std::int64_t n_threads = pool_.size();
    // Up to 4 chunks per thread (claimed dynamically, so a late thread does not hold up the
    // rest), as long as chunks keep min_chunk items; never fewer chunks than threads while
    // there are items enough for one each.
    std::int64_t per_thread = 4;
    while (per_thread > 1 && count < per_thread * n_threads * min_chunk) per_thread /= 2;
    const std::int64_t n_tasks = std::min(count, per_thread * n_threads);
    const std::int64_t base = count / n_tasks;
    const std::int64_t extra = count % n_tasks;  // the first `extra` chunks get one more item
    pool_.parallel_for(n_tasks, [&](std::int64_t task, int thread) {
        const std::int64_t begin = task * base + std::min(task, extra);
        f(begin, begin + base + (task < extra ? 1 : 0), thread);
    });
}

template <class F>
void CpuBackend::serial_or_parallel(bool serial, std::int64_t count, std::int64_t min_chunk,
                                    F&& f) {
    if (serial) {
        f(std::int64_t{0}, count);
        return;
    }
    parallel_ranges(count, min_chunk,
                    [&](std::int64_t begin, std::int64_t end, int) { f(begin, end); });
}

void CpuBackend::store_as(const float* src, std::int64_t n, DType dtype, DeviceBuffer& dst,
                          std::size_t offset_bytes) {
    auto* out = static_cast<std::uint8_t*>(dst.data()) + offset_bytes;
    if (dtype != DType::kF16) {
        std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(float));
        return;
    }
    // A decode step's rows (a few hundred values) on this thread; a prompt's over the pool.
    auto* half = reinterpret_cast<std::uint16_t*>(out);
    parallel_ranges(n, 1 << 15, [&](std::int64_t begin, std::int64_t end, int) {
        store_f16_range(src, begin, end, half);
    });
}

void CpuBackend::store_key_tiles(const float* src, std::int64_t n_rows, std::int64_t row_len,
                                 std::int64_t pos0, DType dtype, DeviceBuffer& dst,
                                 std::size_t offset_bytes) {
    auto* block = static_cast<std::uint8_t*>(dst.data()) + offset_bytes;
    // Each row is converted a chunk at a time (store_f16_range) and scattered kKeyTile elements
    // apart; a decode step's row on this thread, a prompt's rows over the pool.
    const std::int64_t grain =
        std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(row_len, 1));
    parallel_ranges(n_rows, grain, [&](std::int64_t begin, std::int64_t end, int) {
        constexpr std::int64_t kChunk = 256;
        std::uint16_t half[kChunk];
        for (std::int64_t i = begin; i < end; ++i) {
            const std::int64_t p = pos0 + i;
            const std::int64_t first = (p / kKeyTile) * row_len * kKeyTile + p % kKeyTile;
            const float* row = src + i * row_len;
            if (dtype != DType::kF16) {
                auto* out = reinterpret_cast<float*>(block) + first;
                for (std::int64_t e = 0; e < row_len; ++e) out[e * kKeyTile] = row[e];
                continue;
            }
            auto* out = reinterpret_cast<std::uint16_t*>(block) + first;
            for (std::int64_t e0 = 0; e0 < row_len; e0 += kChunk) {
                const std::int64_t n = std::min(kChunk, row_len - e0);
                store_f16_range(row + e0, 0, n, half);
                for (std::int64_t e = 0; e < n; ++e) out[(e0 + e) * kKeyTile] = half[e];
            }
        }
    });
}

void CpuBackend::matmul(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                        const WeightVector* bias) {
    if (n <= 0 || w.rows <= 0) return;
    if (n >= tuning_.gemm_min_tokens) {
        if (amx_prefill(w)) {
            // AMX tiles beat dequantizing + sgemm; in chunks of tokens whose B tiles (64 bytes
            // per column and 16 tokens) stay in L2 while every row tile reads them.
            for (std::int64_t t0 = 0; t0 < n; t0 += kAmxPrefillTokens) {
                const std::int64_t count = std::min(kAmxPrefillTokens, n - t0);
                matmul_decode(w, x + t0 * w.cols, count, y + t0 * w.rows, bias);
            }
            return;
        }
        matmul_prefill(w, x, n, y, bias);
    } else {
        matmul_decode(w, x, n, y, bias);
    }
}

bool CpuBackend::amx_prefill(const WeightMatrix& w) const {
    if (!tuning_.amx || !tuning_.amx_prefill) return false;
    return (tuning_.split_int8_activations && amx_kernel_supports(w)) ||
           amx_bf16_kernel_supports(w);
}

void CpuBackend::matmul_decode(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                               const WeightVector* bias, float* residual) {
    // One job of the fused decode path, so a matmul and a fused op split rows alike and give
    // the same floats (cpu_backend_fused.cpp).
    const WeightMatrix* matrices[] = {&w};
    const DecodeInput* inputs[1] = {};
    prepare_decode_inputs(matrices, x, n, inputs);
    DecodeJob job;
    job.w = &w;
    job.y = y;
    job.bias = bias;
    job.in = inputs[0];
    job.residual = residual;
    run_decode_jobs({&job, 1}, x, n);
}

CpuBackend::DecodeInput CpuBackend::plan_decode(const WeightMatrix& w, const float* x,
                                                std::int64_t n, DecodeScratch& s) {
    DecodeInput in;
    in.bits = w.bits;
    in.group_size = w.group_size;
    const auto n_groups =
        static_cast<std::size_t>(w.group_size > 0 ? n * (w.cols / w.group_size) : 0);
    if (tuning_.int8_activations && n <= 4 && int8_kernel_supports(w)) {
        const auto xq_bytes = static_cast<std::size_t>(n * w.cols + kInt8ActivationPadding);
        if (s.x8.size() < xq_bytes) s.x8.resize(xq_bytes);
        if (s.x8_step.size() < n_groups) {
            s.x8_step.resize(n_groups);
            s.x8_sum.resize(n_groups);
            s.x8_qsum.resize(n_groups);
        }
        in.kernel = DecodeInput::Kernel::kInt8;
        in.int8 = Int8Activations{s.x8.data(), s.x8_step.data(), s.x8_sum.data(), s.x8_qsum.data(),
                                  tuning_.prefetch_bytes};
        return in;
    }
    // Only up to 4 tokens: from 5 on, the f32 kernels decode each row once for all tokens,
    // which measured faster than int16 tiles of 4 tokens (Qwen2.5-0.5B q4, 16 sequences:
    // 592 / 552 tok/s f32 against 442 / 451 int16 on a 16-core Xeon VM).
    if (w.quantized() && tuning_.int16_activations && n <= 4) {
        if (s.xq.size() < static_cast<std::size_t>(n * w.cols))
            s.xq.resize(static_cast<std::size_t>(n * w.cols));
        if (s.xq_step.size() < n_groups) {
            s.xq_step.resize(n_groups);
            s.xq_sum.resize(n_groups);
        }
        in.kernel = DecodeInput::Kernel::kInt16;
        in.int16 = Int16Activations{s.xq.data(), s.xq_step.data(), s.xq_sum.data(),
                                    tuning_.prefetch_bytes, tuning_.grouped_multi_row};
        in.int16.next_tile_prefetch_row_bytes = tuning_.next_tile_prefetch_row_bytes;
        return in;
    }
    const bool split_int8 =
        tuning_.split_int8_activations && split_int8_kernel_supports(w, tuning_.split_int8_variant);
    const auto take_split_int8 = [&] {
        const auto bytes = static_cast<std::size_t>(n * split_int8_token_bytes(w));
        if (s.digits.size() < bytes) s.digits.resize(bytes);
        if (s.digit_unit.size() < n_groups) {
            s.digit_unit.resize(n_groups);
            s.digit_sum.resize(n_groups);
        }
        in.kernel = DecodeInput::Kernel::kSplitInt8;
        in.split = SplitInt8Activations{s.digits.data(), s.digit_unit.data(), s.digit_sum.data(),
                                        tuning_.prefetch_bytes};
        in.split.next_tile_prefetch_row_bytes = tuning_.next_tile_prefetch_row_bytes;
        return in;
    };
    // Up to split_int8_max_tokens (2) tokens: with more, the f32 kernels (or AMX tiles, below)
    // decode each code once for all of them, while every digit of every token costs dot
    // products here.
    if (split_int8 && n <= tuning_.split_int8_max_tokens) return take_split_int8();
    const bool amx_batch = tuning_.amx && n >= std::max<std::int64_t>(2, tuning_.amx_min_tokens);
    const bool large =
        w.rows >= tuning_.amx_bf16_large_side && w.cols >= tuning_.amx_bf16_large_side;
    const std::int64_t bf16_min_tokens =
        large ? tuning_.amx_bf16_large_min_tokens : tuning_.amx_bf16_min_tokens;
    if (tuning_.amx && n >= std::max<std::int64_t>(2, bf16_min_tokens) &&
        amx_bf16_kernel_supports(w)) {
        const auto halves = static_cast<std::size_t>(amx_bf16_tile_bytes(w, n) / 2);
        if (s.amx_bf16_tiles.size() < halves) s.amx_bf16_tiles.resize(halves);
        reserve_scratch(static_cast<std::size_t>(amx_bf16_row_scratch_floats(w)));
        in.kernel = DecodeInput::Kernel::kAmxBf16;
        in.amx_bf16 = s.amx_bf16_tiles.data();
        return in;
    }
    if (amx_batch && tuning_.split_int8_activations && amx_kernel_supports(w) &&
        (w.bits != 8 || !decode_steps_ || n >= tuning_.amx_8bit_min_tokens)) {
        const int digits = tuning_.amx_decode_two_digits && decode_steps_ ? 2 : 4;
        const auto staging = static_cast<std::size_t>(amx_staging_bytes(w, n, digits));
        if (s.digits.size() < staging) s.digits.resize(staging);
        if (s.digit_unit.size() < n_groups) {
            s.digit_unit.resize(n_groups);
            s.digit_sum.resize(n_groups);
        }
        const auto tiles = static_cast<std::size_t>(amx_tile_bytes(w, n, digits));
        if (s.amx_tiles.size() < tiles) s.amx_tiles.resize(tiles);
        const auto per_block =
            static_cast<std::size_t>(amx_token_blocks(n, digits) * (w.cols / w.group_size) * 16);
        if (s.amx_unit.size() < per_block) {
            s.amx_unit.resize(per_block);
            s.amx_sum.resize(per_block);
        }
        reserve_scratch(static_cast<std::size_t>(amx_row_scratch_floats(w)));
        in.kernel = DecodeInput::Kernel::kAmx;
        in.amx = AmxActivations{s.amx_tiles.data(),
                                s.amx_unit.data(),
                                s.amx_sum.data(),
                                tuning_.prefetch_bytes,
                                tuning_.amx_prefetch_next_block,
                                digits,
                                tuning_.amx_pair_groups,
                                tuning_.amx_pair_nibbles};
        return in;
    }
    // A batch of decode steps on 4-bit weights (8-bit ones with VNNI) where the tiles did not
    // take it, with AVX-512 (CpuTuning::split_int8_decode_max_tokens says why), or up to 16
    // with the 256-bit kernels (CpuTuning::split_int8_decode_max_tokens_256).
    const SplitInt8Variant variant = split_int8_resolve_variant(tuning_.split_int8_variant);
    const std::int64_t decode_limit =
        variant == SplitInt8Variant::kAvx512Vnni ? tuning_.split_int8_decode_max_tokens
        : variant == SplitInt8Variant::kAvxVnni || variant == SplitInt8Variant::kAvx2
            ? tuning_.split_int8_decode_max_tokens_256
        : variant == SplitInt8Variant::kNeonDot ? tuning_.split_int8_decode_max_tokens_neon
                                                : 0;
    if (split_int8 && decode_steps_ &&
        (w.bits == 4 || (w.bits == 8 && tuning_.split_int8_decode_8bit)) && n <= decode_limit) {
        return take_split_int8();
    }
    // Larger batches decode each row to f32 once and run the f32 tiles (gemv_rows); see
    // CpuTuning::grouped_max_tokens for where that starts.
    const std::int64_t grouped_max =
        tuning_.grouped_max_tokens > 0 ? tuning_.grouped_max_tokens : default_grouped_max_tokens();
    if (tuning_.grouped_quant && grouped_kernel_supports(w) && n <= grouped_max) {
        if (w.bits == 4 && s.xg.size() < static_cast<std::size_t>(n * w.cols)) {
            s.xg.resize(static_cast<std::size_t>(n * w.cols));
        }
        if (s.xg_sum.size() < n_groups) s.xg_sum.resize(n_groups);
        in.kernel = DecodeInput::Kernel::kGrouped;
        in.grouped = GroupedActivations{w.bits == 4 ? s.xg.data() : x, s.xg_sum.data(),
                                        tuning_.prefetch_bytes, tuning_.q4_lookup,
                                        tuning_.grouped_multi_row};
        in.grouped.next_tile_prefetch_row_bytes = tuning_.next_tile_prefetch_row_bytes;
        return in;
    }
    const std::int64_t batched_from =
        tuning_.batched_min_tokens > 0 ? tuning_.batched_min_tokens : batched_min_tokens();
    if (n > 4 && n >= batched_from && batched_kernel_supports(w)) {
        const auto xt_floats = static_cast<std::size_t>(w.cols * batched_token_stride(n));
        if (s.xt.size() < xt_floats) s.xt.resize(xt_floats);
        reserve_scratch(static_cast<std::size_t>(batched_row_scratch_floats()));
        in.kernel = DecodeInput::Kernel::kBatched;
        in.xt = s.xt.data();
        return in;
    }
    if (n > 4) reserve_scratch(static_cast<std::size_t>(4 * w.cols));
    return in;
}

bool CpuBackend::prepared_by_groups(const DecodeInput& in) {
    switch (in.kernel) {
        case DecodeInput::Kernel::kInt8:
        case DecodeInput::Kernel::kInt16:
        case DecodeInput::Kernel::kSplitInt8:
        case DecodeInput::Kernel::kGrouped:
            return true;
        default:
            return false;
    }
}

void CpuBackend::prepare_groups(const WeightMatrix& w, const DecodeInput& in, const float* x,
                                std::int64_t begin, std::int64_t end, DecodeScratch& s) const {
    switch (in.kernel) {
        case DecodeInput::Kernel::kInt8:
            quantize_activations_int8(w, x, begin, end, s.x8.data(), s.x8_step.data(),
                                      s.x8_sum.data(), s.x8_qsum.data());
            return;
        case DecodeInput::Kernel::kInt16:
            quantize_activations_int16(w, x, begin, end, s.xq.data(), s.xq_step.data(),
                                       s.xq_sum.data());
            return;
        case DecodeInput::Kernel::kSplitInt8:
            split_activations_int8(tuning_.split_int8_variant, w, x, begin, end, s.digits.data(),
                                   s.digit_unit.data(), s.digit_sum.data());
            return;
        case DecodeInput::Kernel::kGrouped:
            prepare_grouped_activations(w, x, begin, end, s.xg.data(), s.xg_sum.data());
            return;
        default:
            return;
    }
}

CpuBackend::DecodeInput CpuBackend::prepare_decode(const WeightMatrix& w, const float* x,
                                                   std::int64_t n, DecodeScratch& s) {
    DecodeInput in = plan_decode(w, x, n, s);
    if (in.kernel == DecodeInput::Kernel::kBatched) {
        const std::int64_t cols = w.cols;
        serial_or_parallel(n * cols < kMinParallelElements, cols, 256,
                           [&](std::int64_t begin, std::int64_t end) {
                               transpose_tokens(x, n, cols, begin, end, s.xt.data());
                           });
        return in;
    }
    if (in.kernel == DecodeInput::Kernel::kAmxBf16) {
        // Per 32-column step, all tokens.
        std::uint16_t* tiles = s.amx_bf16_tiles.data();
        serial_or_parallel(n * w.cols < 8192, w.cols / 32, 4,
                           [&](std::int64_t begin, std::int64_t end) {
                               prepare_amx_bf16_activations(w, x, n, begin, end, tiles);
                           });
        return in;
    }
    if (in.kernel == DecodeInput::Kernel::kAmx) {
        // Per weight group, all tokens: each group's B tiles hold the 16 tokens of a block.
        const AmxBuffers buffers{s.digits.data(),    s.digit_unit.data(), s.digit_sum.data(),
                                 s.amx_tiles.data(), s.amx_unit.data(),   s.amx_sum.data(),
                                 in.amx.digits,      in.amx.pair_groups,  in.amx.pair_nibbles};
        serial_or_parallel(n * w.cols < tuning_.amx_prepare_serial_below, w.cols / w.group_size, 2,
                           [&](std::int64_t begin, std::int64_t end) {
                               prepare_amx_activations(w, x, n, begin, end, buffers);
                           });
        return in;
    }
    if (!prepared_by_groups(in)) return in;
    // Below `serial_below` activations one thread beats waking the pool; every group comes out
    // the same either way.
    //  - int8: the AVX2 quantizer takes ~0.3 ns per element.
    //  - int16: the vector quantizer needs about 3,000 instructions for Qwen2.5-0.5B's 4864
    //    columns (counted, not timed), less than a fork-join (~2.7 µs); the scalar loop costs a
    //    quarter of a 16-thread 4-bit matmul at 8k columns.
    //  - split-int8: about 0.5 ns per activation on one Sapphire Rapids core (896: 0.45 µs,
    //    4864: 2.4 µs); wider rows (Llama's 8192, 7B models' 18944) split over the pool. On the
    //    lent 16-vCPU Xeon the serial split took 1.6 and 4.5-7 µs, most of it invalidating the
    //    other cores' copies of the buffer; preparing it inside the previous op, or a copy per
    //    thread, measured no faster in the engine (bench/RESULTS.md, session 13); nor did
    //    splitting 4864 or 896 columns on the pool (--ab split-int8-serial, session 20, run 71).
    //  - grouped: reordering x is a copy of n * cols floats.
    std::int64_t serial_below = 32768;
    std::int64_t min_chunk = 16;
    if (in.kernel == DecodeInput::Kernel::kInt16) {
        serial_below = quantize_int16_is_vectorized(w) ? 32768 : 4096;
        min_chunk = 4;
    } else if (in.kernel == DecodeInput::Kernel::kSplitInt8) {
        serial_below = tuning_.split_int8_prepare_serial_below;
    }
    const std::int64_t total_groups = n * (w.cols / w.group_size);
    serial_or_parallel(
        n * w.cols < serial_below, total_groups, min_chunk,
        [&](std::int64_t begin, std::int64_t end) { prepare_groups(w, in, x, begin, end, s); });
    return in;
}

void CpuBackend::decode_rows(const WeightMatrix& w, const DecodeInput& in, const float* x,
                             std::int64_t n, std::int64_t row_begin, std::int64_t row_end,
                             const WeightVector* bias, float* y, int thread) {
    switch (in.kernel) {
        case DecodeInput::Kernel::kInt16:
            gemv_rows_int16(w, in.int16, n, row_begin, row_end, bias, y, w.rows);
            return;
        case DecodeInput::Kernel::kGrouped:
            gemv_rows_grouped(w, in.grouped, n, row_begin, row_end, bias, y, w.rows);
            return;
        case DecodeInput::Kernel::kSplitInt8: {
            // Token t's digits, group units and sums within the prepared [n, ...] arrays.
            const auto token = [&](std::int64_t t) {
                SplitInt8Activations at = in.split;
                at.digits += t * split_int8_token_bytes(w);
                at.unit += t * (w.cols / w.group_size);
                at.sum += t * (w.cols / w.group_size);
                return at;
            };
            // Four (or a last three) tokens at a time where the kernel has such a pass, then
            // two, then one by one, over the same rows: the later passes read the codes from
            // cache, and each token gets the floats it gets alone.
            std::int64_t t = 0;
            while (tuning_.split_int8_four && n - t >= 3) {
                const int count = n - t >= 4 ? 4 : 3;
                SplitInt8Activations xs[4];
                const SplitInt8Activations* xp[4];
                float* yp[4];
                for (int i = 0; i < count; ++i) {
                    xs[i] = token(t + i);
                    xp[i] = &xs[i];
                    yp[i] = y + (t + i) * w.rows;
                }
                if (!gemv_rows_split_int8_many(tuning_.split_int8_variant, w, xp, count, row_begin,
                                               row_end, bias, yp)) {
                    break;
                }
                t += count;
            }
            for (; tuning_.split_int8_pair && t + 2 <= n; t += 2) {
                gemv_rows_split_int8_pair(tuning_.split_int8_variant, w, token(t), token(t + 1),
                                          row_begin, row_end, bias, y + t * w.rows,
                                          y + (t + 1) * w.rows);
            }
            for (; t < n; ++t) {
                gemv_rows_split_int8(tuning_.split_int8_variant, w, token(t), row_begin, row_end,
                                     bias, y + t * w.rows);
            }
            return;
        }
        case DecodeInput::Kernel::kInt8:
            gemv_rows_int8(int8_resolve_variant(tuning_.int8_variant), w, in.int8, n, row_begin,
                           row_end, bias, y, w.rows);
            return;
        case DecodeInput::Kernel::kAmxBf16:
            gemv_rows_amx_bf16(w, in.amx_bf16, n, row_begin, row_end, bias, y, w.rows,
                               tuning_.prefetch_bytes,
                               scratch_[static_cast<std::size_t>(thread)].data());
            return;
        case DecodeInput::Kernel::kAmx:
            gemv_rows_amx(w, in.amx, n, row_begin, row_end, bias, y, w.rows,
                          scratch_[static_cast<std::size_t>(thread)].data());
            return;
        case DecodeInput::Kernel::kBatched:
            gemv_rows_batched(w, in.xt, n, row_begin, row_end, bias, y, w.rows,
                              scratch_[static_cast<std::size_t>(thread)].data(),
                              tuning_.prefetch_bytes);
            return;
        case DecodeInput::Kernel::kPlain:
            // The limit is looked up only for batches of 5 and more (this runs per chunk).
            if (n > 4 &&
                n <= (tuning_.plain_tiles_max_tokens > 0 ? tuning_.plain_tiles_max_tokens
                                                         : default_plain_tiles_max_tokens())) {
                row_begin = gemv_rows_plain_tiles(w, x, n, row_begin, row_end, bias, y, w.rows,
                                                  tuning_.prefetch_bytes);
            }
            gemv_rows(w, x, n, row_begin, row_end, bias, y, w.rows,
                      scratch_[static_cast<std::size_t>(thread)].data(), tuning_.prefetch_bytes);
            return;
    }
}

void CpuBackend::matmul_prefill(const WeightMatrix& w, const float* x, std::int64_t n, float* y,
                                const WeightVector* bias) {
    const std::int64_t rows = w.rows;
    const std::int64_t cols = w.cols;
    const std::int64_t n_threads = pool_.size();
    // Panels of at most max_panel_rows rows, as many as a multiple of the thread count so the
    // last round has no idle threads; panels of fewer than 32 rows would starve sgemm, so thin
    // matrices (k/v projections) are split over tokens as well.
    std::int64_t n_panels = ceil_div(rows, tuning_.max_panel_rows);
    n_panels =
        std::min(ceil_div(n_panels, n_threads) * n_threads, std::max<std::int64_t>(1, rows / 32));
    n_panels = std::max<std::int64_t>(n_panels, 1);
    const std::int64_t panel_rows = ceil_div(rows, n_panels);
    n_panels = ceil_div(rows, panel_rows);
    std::int64_t n_token_blocks = 1;
    if (n_panels < n_threads) {
        n_token_blocks = std::max<std::int64_t>(1, std::min(ceil_div(n_threads, n_panels), n / 64));
    }
    const std::int64_t token_block = ceil_div(n, n_token_blocks);
    n_token_blocks = ceil_div(n, token_block);

    // f32 weights that are 4-byte aligned are multiplied in place; everything else is decoded.
    const bool in_place = !w.quantized() && w.dtype == DType::kF32 &&
                          reinterpret_cast<std::uintptr_t>(w.data) % alignof(float) == 0;
    if (!in_place) reserve_scratch(static_cast<std::size_t>(panel_rows * cols));
    const bool blas = tuning_.use_blas && have_blas();
    const bool has_bias = bias != nullptr && bias->valid();

    pool_.parallel_for(n_panels * n_token_blocks, [&](std::int64_t task, int thread) {
        const std::int64_t p = task / n_token_blocks;
        const std::int64_t tb = task % n_token_blocks;
        const std::int64_t r0 = p * panel_rows;
        const std::int64_t r1 = std::min(rows, r0 + panel_rows);
        const std::int64_t t0 = tb * token_block;
        const std::int64_t t1 = std::min(n, t0 + token_block);
        const float* panel;
        if (in_place) {
            panel = static_cast<const float*>(w.data) + r0 * cols;
        } else {
            float* buf = scratch_[static_cast<std::size_t>(thread)].data();
            dequantize_rows(w, r0, r1, buf);
            panel = buf;
        }
        float* y_block = y + t0 * rows + r0;
        if (blas) {
            gemm_panel(x + t0 * cols, t1 - t0, cols, panel, r1 - r0, y_block, rows);
        } else {
            const WeightMatrix view{DType::kF32, r1 - r0, cols, panel};
            gemv_rows(view, x + t0 * cols, t1 - t0, 0, r1 - r0, nullptr, y_block, rows, nullptr);
        }
        if (has_bias) {
            for (std::int64_t r = r0; r < r1; ++r) {
                const float b = load_scalar(bias->dtype, bias->data, r);
                for (std::int64_t t = t0; t < t1; ++t) y[t * rows + r] += b;
            }
        }
    });
}

void CpuBackend::embed(const WeightMatrix& table, std::span<const std::int32_t> ids, float* out) {
    const auto count = static_cast<std::int64_t>(ids.size());
    parallel_ranges(count, 8, [&](std::int64_t begin, std::int64_t end, int) {
        for (std::int64_t i = begin; i < end; ++i) {
            const std::int32_t id = ids[static_cast<std::size_t>(i)];
            float* row = out + i * table.cols;
            if (id < 0 || id >= table.rows) {
                std::fill(row, row + table.cols, 0.0f);  // out of contract; never read past
                continue;
            }
            dequantize_rows(table, id, id + 1, row);
        }
    });
}

void CpuBackend::rms_norm(const float* x, const WeightVector& weight, std::int64_t n,
                          std::int64_t d, float eps, float* y) {
    if (n * d < kMinParallelElements) {
        rms_norm_rows(x, weight, 0, n, d, eps, y);
        return;
    }
    parallel_ranges(n, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(d, 1)),
                    [&](std::int64_t begin, std::int64_t end, int) {
                        rms_norm_rows(x, weight, begin, end, d, eps, y);
                    });
}

void CpuBackend::prepare_rope_angles(std::span<const std::int32_t> positions,
                                     std::span<const float> inv_freq, float attention_scaling) {
    RopeAngles& r = rope_angles_;
    // Compared by value, not by address: a freed and reallocated frequency table may reuse
    // the address of another model's.
    if (r.scaling == attention_scaling && std::ranges::equal(r.positions, positions) &&
        std::ranges::equal(r.inv_freq, inv_freq)) {
        return;
    }
    r.positions.assign(positions.begin(), positions.end());
    r.inv_freq.assign(inv_freq.begin(), inv_freq.end());
    r.scaling = attention_scaling;
    const auto n_freq = static_cast<std::int64_t>(inv_freq.size());
    const auto n_tokens = static_cast<std::int64_t>(positions.size());
    r.cos_sin.resize(static_cast<std::size_t>(2 * n_tokens * n_freq));
    auto fill = [&](std::int64_t begin, std::int64_t end, int) {
        for (std::int64_t t = begin; t < end; ++t) {
            float* cos_t = r.cos_sin.data() + 2 * t * n_freq;
            float* sin_t = cos_t + n_freq;
            // Angles exactly as the reference computes them (f32 product, double cos/sin), so
            // long positions agree to the last bit.
            const float pos = static_cast<float>(positions[static_cast<std::size_t>(t)]);
            for (std::int64_t i = 0; i < n_freq; ++i) {
                const double theta =
                    static_cast<double>(pos * inv_freq[static_cast<std::size_t>(i)]);
                cos_t[i] = static_cast<float>(std::cos(theta)) * attention_scaling;
                sin_t[i] = static_cast<float>(std::sin(theta)) * attention_scaling;
            }
        }
    };
    if (n_tokens * n_freq < kMinParallelElements) {
        fill(0, n_tokens, 0);
    } else {
        parallel_ranges(n_tokens, 1, fill);
    }
}

void CpuBackend::rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
                      const std::int32_t* positions, std::span<const float> inv_freq,
                      float attention_scaling) {
    const auto n_freq = static_cast<std::int64_t>(inv_freq.size());
    if (n_freq == 0 || n_tokens <= 0) return;
    prepare_rope_angles({positions, static_cast<std::size_t>(n_tokens)}, inv_freq,
                        attention_scaling);
    const float* angles = rope_angles_.cos_sin.data();
    auto rotate = [&](std::int64_t begin, std::int64_t end, int) {
        for (std::int64_t t = begin; t < end; ++t) {
            const float* cos_t = angles + 2 * t * n_freq;
            const float* sin_t = cos_t + n_freq;
            for (std::int64_t h = 0; h < n_heads; ++h) {
                float* xa = x + (t * n_heads + h) * head_dim;
                float* xb = xa + n_freq;
                for (std::int64_t i = 0; i < n_freq; ++i) {
                    const float a = xa[i];
                    const float b = xb[i];
                    xa[i] = a * cos_t[i] - b * sin_t[i];
                    xb[i] = b * cos_t[i] + a * sin_t[i];
                }
            }
        }
    };
    if (n_tokens * n_heads * n_freq < kMinParallelElements) {
        rotate(0, n_tokens, 0);
    } else {
        parallel_ranges(n_tokens, 1, rotate);
    }
}

void CpuBackend::silu_mul(const float* gate, const float* up, std::int64_t n, float* out) {
    if (n < kMinParallelElements) {
        silu_mul_uniform(gate, up, 0, n, out);
        return;
    }
    parallel_ranges(n, 4096, [&](std::int64_t begin, std::int64_t end, int) {
        silu_mul_uniform(gate, up, begin, end, out);
    });
}

void CpuBackend::add(const float* a, const float* b, std::int64_t n, float* out) {
    if (n < kMinParallelElements) {
        add_range(a, b, 0, n, out);
        return;
    }
    parallel_ranges(n, 4096, [&](std::int64_t begin, std::int64_t end, int) {
        add_range(a, b, begin, end, out);
    });
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options, const CpuTuning& tuning) {
    return std::make_unique<CpuBackend>(options, tuning);
}

}  // namespace brigade::model::cpu
