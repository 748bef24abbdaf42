#pragma once
// Whole-vocabulary passes over a row of logits for sampling (model/sampling.cpp): the largest
// logit, where it first occurs, and the softmax normalizer. A vocabulary of 150k entries makes
// these the bulk of a token's sampling time, so they run on SIMD (Highway, dynamic dispatch),
// and for a request sampled alone in chunks on the stage's threads: on the lent 16-vCPU Xeon a
// token's sampling took 0.07-1.0 ms on one thread, against a 2.5-4 ms decode step of
// Qwen2.5-0.5B (bench/RESULTS.md, session 24).

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace brigade::model {

class Backend;

// Entries per block of block_maxima as logit_stats computes them (Sampler selects its first
// candidates from these).
inline constexpr std::int64_t kLogitBlock = 64;

// The whole-row passes of logit_stats and Sampler run in chunks of row_chunk(n) entries, fixed
// by the row's length alone (a multiple of 256: the normalizer's float blocks stay where they
// were), at most kMaxRowChunks of them. The chunks run on a backend's host threads when one is
// given, else one after another, and their results are combined in chunk order either way, so
// a row's stats, and a seeded draw, do not depend on the threads (a request resumed on another
// node draws the same tokens).
inline constexpr std::int64_t kMaxRowChunks = 32;
std::int64_t row_chunk(std::int64_t n);
// f(begin, end) for each chunk of [0, n): on `host`'s threads (Backend::run_host_tasks) when
// given and there is more than one chunk, else in order on this thread. Not from inside a host
// task of the same backend (its pool is not reentrant).
void for_each_row_chunk(Backend* host, std::int64_t n,
                        void (*f)(void* ctx, std::int64_t begin, std::int64_t end), void* ctx);
template <class F>
void for_each_row_chunk(Backend* host, std::int64_t n, F&& f) {
    using Fn = std::remove_reference_t<F>;
    for_each_row_chunk(
        host, n,
        [](void* ctx, std::int64_t begin, std::int64_t end) {
            (*static_cast<Fn*>(ctx))(begin, end);
        },
        const_cast<void*>(static_cast<const void*>(&f)));
}

struct LogitStats {
    float max = 0.0f;
    std::int64_t argmax = 0;  // first index holding `max` (ties to the lowest id, as torch)
    // Σ exp(x - max) over the row: float exponentials (about 1 ulp each) summed in blocks
    // into a double, so log(sum) is within ~1e-6 of an all-double computation.
    double sum_exp = 0.0;
    bool has_nan = false;  // the row holds a NaN (then block maxima are not meaningful)
};

// For a non-empty row; -inf entries (masked tokens) contribute nothing. NaN entries (a corrupt
// checkpoint) give meaningless sums but never an argmax outside the row. Two passes (the
// maxima of kLogitBlock-entry blocks, then the normalizer), in chunks on `host` when given
// (see row_chunk). `block_max`, when given, is resized to the row's blocks and keeps their
// maxima (a reused one does not allocate).
LogitStats logit_stats(std::span<const float> x, Backend* host = nullptr,
                       std::vector<float>* block_max = nullptr);

// Sampler's deep draws (sampling_deep.cpp): the candidates after the sorted prefix, each in
// a bucket of its logit, and the probability mass of each bucket.
struct CandidateBuckets {
    double max = 0.0;        // the row's largest logit
    double total = 1.0;      // the softmax normalizer relative to it
    double scale = 1.0;      // buckets per unit of logit below the max
    double min_prob = 0.0;   // > 0: candidates less likely than this go to `dropped`
    std::uint16_t last = 0;  // the bucket of everything further below
    std::uint16_t dropped = 0;
    std::uint16_t skip = 0;     // marks candidates of the sorted prefix
    float pivot_logit = 0.0f;   // the prefix's last candidate: it and those before it
    std::int32_t pivot_id = 0;  // (higher logits, equal ones with lower ids) are skipped
};
// For every i: bucket[i] = floor((max - x[i]) * scale) capped at `last`, `dropped` or `skip`;
// mass[bucket[i]] += exp(x[i] - max) / total (not for skipped ones; Highway's Exp, within 1 ulp
// of std::exp). `mass` has dropped + 1 entries. False if the row holds a NaN (nothing
// meaningful to bucket). In chunks (finer than row_chunk's), on `host` when given: each chunk
// sums into its own part of `chunk_mass` (resized; a reused one does not allocate), added to
// `mass` in chunk order.
bool bucket_candidates(std::span<const float> x, const CandidateBuckets& spec,
                       std::uint16_t* bucket, double* mass, Backend* host,
                       std::vector<double>& chunk_mass);

// Writes the indices i with bucket[i] == b to out, in ascending order, and returns how many
// (out has room for bucket.size()). In chunks on `host` when given.
std::int64_t bucket_members(std::span<const std::uint16_t> bucket, std::uint16_t b,
                            std::int32_t* out, Backend* host = nullptr);

}  // namespace brigade::model
