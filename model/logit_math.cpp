#include "model/logit_math.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "model/backend.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/logit_math.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
#include "model/cpu/vector_max-inl.hpp"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::model {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float MaxOfRow(const float* x, std::int64_t n) { return cpu::HWY_NAMESPACE::max_of_floats(x, n); }

double SumExpShifted(const float* x, std::int64_t n, float shift) {
    const hn::ScalableTag<float> d;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
    const auto vshift = hn::Set(d, shift);
    // exp() of anything below this is under 1e-38 of the largest term (which is 1): clamping
    // keeps -inf (masked tokens) inside the range Highway's Exp is defined on.
    const auto floor = hn::Set(d, -87.0f);
    constexpr std::int64_t kBlock = 256;  // float partial sums stay well within 1e-6
    double total = 0.0;
    std::int64_t i = 0;
    while (i + lanes <= n) {
        auto acc = hn::Zero(d);
        const std::int64_t end = std::min(n, i + kBlock);
        for (; i + lanes <= end; i += lanes) {
            const auto v = hn::Max(hn::Sub(hn::LoadU(d, x + i), vshift), floor);
            acc = hn::Add(acc, hn::Exp(d, v));
        }
        total += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, acc)));
    }
    for (; i < n; ++i) total += std::exp(static_cast<double>(x[i]) - shift);
    return total;
}

// out[b] = the largest of x[b * block, (b + 1) * block) (the last block may be shorter). False
// if x holds a NaN.
bool BlockMaxima(const float* x, std::int64_t n, std::int64_t block, float* out) {
    const hn::ScalableTag<float> d;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
    auto nan = hn::FirstN(d, 0);
    for (std::int64_t b0 = 0; b0 < n; b0 += block) {
        const std::int64_t end = std::min(n, b0 + block);
        std::int64_t i = b0;
        float m = -INFINITY;
        if (end - b0 >= lanes) {
            auto vm = hn::LoadU(d, x + i);
            nan = hn::Or(nan, hn::Ne(vm, vm));
            for (i += lanes; i + lanes <= end; i += lanes) {
                const auto v = hn::LoadU(d, x + i);
                nan = hn::Or(nan, hn::Ne(v, v));
                vm = hn::Max(vm, v);
            }
            m = hn::GetLane(hn::MaxOfLanes(d, vm));
        }
        for (; i < end; ++i) {
            if (std::isnan(x[i])) return false;
            m = std::max(m, x[i]);
        }
        out[b0 / block] = m;
    }
    return hn::AllFalse(d, nan);
}

// See bucket_candidates (logit_math.hpp): x[0, n) are the candidates first, first + 1, ...
// Returns false at the first NaN.
bool BucketCandidates(const float* x, std::int64_t n, std::int64_t first,
                      const CandidateBuckets& spec, std::uint16_t* bucket, double* mass) {
    const hn::ScalableTag<double> d;
    const hn::Rebind<float, decltype(d)> df;
    const hn::Rebind<std::int32_t, decltype(d)> di;
    const hn::Rebind<std::uint16_t, decltype(d)> du;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
    const auto max = hn::Set(d, spec.max);
    const auto inv_total = hn::Set(d, 1.0 / spec.total);
    const auto scale = hn::Set(d, spec.scale);
    const auto last = hn::Set(d, static_cast<double>(spec.last));
    const auto skip = hn::Set(d, static_cast<double>(spec.skip));
    const auto pivot = hn::Set(d, static_cast<double>(spec.pivot_logit));
    const auto pivot_id = hn::Set(d, static_cast<double>(spec.pivot_id));
    const auto unused = hn::Set(d, static_cast<double>(spec.dropped + 1));
    const auto floor = hn::Set(d, -1000.0);  // keeps -inf inside Exp's range; exp is 0 there
    // One candidate's share: min-p's test on the reference's own value where the vector one is
    // too close to the threshold to tell.
    auto add = [&](std::int64_t i, std::uint16_t b, double p) {
        if (b != spec.skip && spec.min_prob > 0.0) {
            if (std::abs(p - spec.min_prob) <= 1e-12 * spec.min_prob) {
                p = std::exp(static_cast<double>(x[i]) - spec.max) / spec.total;
            }
            if (p < spec.min_prob) b = spec.dropped;
        }
        bucket[i] = b;
        if (b != spec.skip) mass[b] += p;
    };
    HWY_ALIGN double p_lanes[hn::MaxLanes(d)];
    HWY_ALIGN std::uint16_t b_lanes[hn::MaxLanes(d)];
    // Without min-p a lane's bucket goes straight to `bucket` and its share into mass[b] (the
    // prefix's skipped lanes into a slot past `dropped`, never read): no branch per candidate,
    // the same sums in the same order.
    const bool plain = spec.min_prob <= 0.0;
    auto to_u16 = [&](hn::Vec<decltype(d)> v) { return hn::DemoteTo(du, hn::DemoteTo(di, v)); };
    std::int64_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        const auto v = hn::PromoteTo(d, hn::LoadU(df, x + i));
        if (!hn::AllFalse(d, hn::Ne(v, v))) return false;
        const auto rest =
            hn::Or(hn::Lt(v, pivot),
                   hn::And(hn::Eq(v, pivot),
                           hn::Gt(hn::Iota(d, static_cast<double>(first + i)), pivot_id)));
        const auto p = hn::Mul(hn::Exp(d, hn::Max(hn::Sub(v, max), floor)), inv_total);
        const auto b = hn::Floor(hn::Min(hn::Mul(hn::Sub(max, v), scale), last));
        hn::Store(p, d, p_lanes);
        if (plain) {
            hn::StoreU(to_u16(hn::IfThenElse(rest, b, skip)), du, bucket + i);
            hn::Store(to_u16(hn::IfThenElse(rest, b, unused)), du, b_lanes);
            for (std::int64_t k = 0; k < lanes; ++k) mass[b_lanes[k]] += p_lanes[k];
        } else {
            hn::Store(to_u16(hn::IfThenElse(rest, b, skip)), du, b_lanes);
            for (std::int64_t k = 0; k < lanes; ++k) add(i + k, b_lanes[k], p_lanes[k]);
        }
    }
    for (; i < n; ++i) {
        const double v = static_cast<double>(x[i]);
        if (std::isnan(v)) return false;
        const bool rest =
            v < spec.pivot_logit || (v == spec.pivot_logit && first + i > spec.pivot_id);
        const double b = std::min((spec.max - v) * spec.scale, static_cast<double>(spec.last));
        add(i, rest ? static_cast<std::uint16_t>(b) : spec.skip,
            std::exp(v - spec.max) / spec.total);
    }
    return true;
}

// See bucket_members (logit_math.hpp).
std::int64_t BucketMembers(const std::uint16_t* bucket, std::int64_t n, std::uint16_t b,
                           std::int32_t* out) {
    const hn::ScalableTag<std::uint16_t> d;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
    const auto want = hn::Set(d, b);
    std::int64_t count = 0;
    std::int64_t i = 0;
    // A bucket holds a few dozen of 150k candidates: most vectors hold none of them.
    for (; i + lanes <= n; i += lanes) {
        if (hn::AllFalse(d, hn::Eq(hn::LoadU(d, bucket + i), want))) continue;
        for (std::int64_t k = i; k < i + lanes; ++k) {
            if (bucket[k] == b) out[count++] = static_cast<std::int32_t>(k);
        }
    }
    for (; i < n; ++i) {
        if (bucket[i] == b) out[count++] = static_cast<std::int32_t>(i);
    }
    return count;
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model {

HWY_EXPORT(MaxOfRow);
HWY_EXPORT(SumExpShifted);
HWY_EXPORT(BucketCandidates);
HWY_EXPORT(BlockMaxima);
HWY_EXPORT(BucketMembers);

namespace {

// The bucket passes' chunks: finer than row_chunk's, as a candidate's exponential and bucket in
// double cost 3-4 ns (a 4k chunk is still ~15 µs of work), so that a 150k row keeps 16 threads
// busy; at most kMaxRowChunks. Their order does not reach a draw: the deep draw decides only
// with a margin over any summation order (sampling_deep.cpp).
std::int64_t bucket_chunk(std::int64_t n) {
    constexpr std::int64_t kMinChunk = 4096;
    const std::int64_t even = (n + kMaxRowChunks - 1) / kMaxRowChunks;
    return std::max(kMinChunk, (even + 255) / 256 * 256);
}

// f(c) for the n_chunks chunks, on `host`'s threads when given.
template <class F>
void for_each_chunk_index(Backend* host, std::int64_t n_chunks, F&& f) {
    if (host == nullptr || n_chunks <= 1) {
        for (std::int64_t c = 0; c < n_chunks; ++c) f(c);
        return;
    }
    for_each_host_task(*host, n_chunks, f);
}

}  // namespace

std::int64_t bucket_members(std::span<const std::uint16_t> bucket, std::uint16_t b,
                            std::int32_t* out, Backend* host) {
    // Each chunk writes its members at its own offset (out has room for every index), then
    // they are moved together in chunk order: a scan of the whole row from one thread read
    // 300 KB that other cores had just written.
    const auto n = static_cast<std::int64_t>(bucket.size());
    const std::int64_t chunk = bucket_chunk(n);
    const std::int64_t n_chunks = (n + chunk - 1) / chunk;
    std::array<std::int64_t, kMaxRowChunks + 1> found{};
    for_each_chunk_index(host, n_chunks, [&](std::int64_t c) {
        const std::int64_t begin = c * chunk;
        const std::int64_t count = HWY_DYNAMIC_DISPATCH(BucketMembers)(
            bucket.data() + begin, std::min(n, begin + chunk) - begin, b, out + begin);
        // BucketMembers counts from the chunk's first entry.
        for (std::int64_t m = 0; m < count; ++m) out[begin + m] += static_cast<std::int32_t>(begin);
        found[static_cast<std::size_t>(c)] = count;
    });
    std::int64_t total = 0;
    for (std::int64_t c = 0; c < n_chunks; ++c) {
        const std::int64_t count = found[static_cast<std::size_t>(c)];
        if (total != c * chunk) std::copy_n(out + c * chunk, count, out + total);
        total += count;
    }
    return total;
}

bool bucket_candidates(std::span<const float> x, const CandidateBuckets& spec,
                       std::uint16_t* bucket, double* mass, Backend* host,
                       std::vector<double>& chunk_mass) {
    const auto n = static_cast<std::int64_t>(x.size());
    const std::int64_t chunk = bucket_chunk(n);
    const std::int64_t n_chunks = (n + chunk - 1) / chunk;
    const std::int64_t n_mass = spec.dropped + 1;
    // Each chunk's masses, and one slot more: BucketCandidates sums the skipped candidates there.
    const std::int64_t stride = n_mass + 1;
    chunk_mass.resize(static_cast<std::size_t>(n_chunks * stride));
    std::array<bool, kMaxRowChunks + 1> clean{};
    for_each_chunk_index(host, n_chunks, [&](std::int64_t c) {
        const std::int64_t begin = c * chunk;
        double* own = chunk_mass.data() + c * stride;
        std::fill(own, own + stride, 0.0);
        clean[static_cast<std::size_t>(c)] = HWY_DYNAMIC_DISPATCH(BucketCandidates)(
            x.data() + begin, std::min(n, begin + chunk) - begin, begin, spec, bucket + begin, own);
    });
    if (!std::all_of(clean.begin(), clean.begin() + n_chunks, [](bool c) { return c; })) {
        return false;
    }
    // Every bucket's chunks added in chunk order, the buckets in slices over the threads where
    // there are enough chunks to pay for a region (a region costs about what adding 4 chunks'
    // masses on one thread does).
    constexpr std::int64_t kSlice = 512;
    constexpr std::int64_t kMinChunksToMergeOnHost = 5;
    Backend* merge_host = n_chunks >= kMinChunksToMergeOnHost ? host : nullptr;
    for_each_chunk_index(merge_host, (n_mass + kSlice - 1) / kSlice, [&](std::int64_t s) {
        const std::int64_t b1 = std::min(n_mass, (s + 1) * kSlice);
        for (std::int64_t c = 0; c < n_chunks; ++c) {
            const double* own = chunk_mass.data() + c * stride;
            for (std::int64_t b = s * kSlice; b < b1; ++b) mass[b] += own[b];
        }
    });
    return true;
}

std::int64_t row_chunk(std::int64_t n) {
    // At least 16k entries (a chunk's pass then takes a few microseconds, more than handing it
    // to another thread costs), a multiple of 256 and of kLogitBlock.
    constexpr std::int64_t kMinChunk = 16384;
    const std::int64_t even = (n + kMaxRowChunks - 1) / kMaxRowChunks;
    return std::max(kMinChunk, (even + 255) / 256 * 256);
}

void for_each_row_chunk(Backend* host, std::int64_t n,
                        void (*f)(void* ctx, std::int64_t begin, std::int64_t end), void* ctx) {
    const std::int64_t chunk = row_chunk(n);
    const std::int64_t n_chunks = (n + chunk - 1) / chunk;
    for_each_chunk_index(host, n_chunks,
                         [&](std::int64_t c) { f(ctx, c * chunk, std::min(n, (c + 1) * chunk)); });
}

LogitStats logit_stats(std::span<const float> x, Backend* host, std::vector<float>* block_max) {
    LogitStats s;
    if (x.empty()) return s;
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<float> own;
    std::vector<float>& maxima = block_max != nullptr ? *block_max : own;
    maxima.resize(static_cast<std::size_t>((n + kLogitBlock - 1) / kLogitBlock));
    const std::int64_t chunk = row_chunk(n);
    std::array<bool, kMaxRowChunks + 1> clean{};
    for_each_row_chunk(host, n, [&](std::int64_t begin, std::int64_t end) {
        clean[static_cast<std::size_t>(begin / chunk)] = HWY_DYNAMIC_DISPATCH(BlockMaxima)(
            x.data() + begin, end - begin, kLogitBlock, maxima.data() + begin / kLogitBlock);
    });
    const std::int64_t n_chunks = (n + chunk - 1) / chunk;
    s.has_nan = !std::all_of(clean.begin(), clean.begin() + n_chunks, [](bool c) { return c; });
    if (!s.has_nan) {
        // The first block holding the maximum holds its first occurrence.
        const auto n_blocks = static_cast<std::int64_t>(maxima.size());
        s.max = HWY_DYNAMIC_DISPATCH(MaxOfRow)(maxima.data(), n_blocks);
        const std::int64_t block = std::find(maxima.begin(), maxima.end(), s.max) - maxima.begin();
        s.argmax = std::find(x.begin() + block * kLogitBlock, x.end(), s.max) - x.begin();
    } else {
        // A NaN (a corrupt checkpoint) can make a vector max NaN, which no entry equals: the
        // scalar first maximum skips them, so the token stays in range.
        std::int64_t best = 0;
        for (std::int64_t i = 1; i < n; ++i) {
            if (x[static_cast<std::size_t>(i)] > x[static_cast<std::size_t>(best)]) best = i;
        }
        s.argmax = best;
        s.max = x[static_cast<std::size_t>(best)];
    }
    std::array<double, kMaxRowChunks + 1> partial{};
    for_each_row_chunk(host, n, [&](std::int64_t begin, std::int64_t end) {
        partial[static_cast<std::size_t>(begin / chunk)] =
            HWY_DYNAMIC_DISPATCH(SumExpShifted)(x.data() + begin, end - begin, s.max);
    });
    for (std::int64_t c = 0; c < n_chunks; ++c) s.sum_exp += partial[static_cast<std::size_t>(c)];
    return s;
}

}  // namespace brigade::model
#endif  // HWY_ONCE
