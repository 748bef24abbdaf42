// Issue 8, "no allocation in the decode loop": once the stage's scratch, the backend's scratch,
// the caller's StageOutput and the Sampler have grown, a decode step allocates no heap memory:
// not for one sequence, not for a batch, not while sampling (its whole-row passes in chunks on
// the pool) or listing top_logprobs, on the CPU backend with several threads, for BF16 and MLX
// 4-bit weights.
//
// Allocations are counted by replacing the global operator new of this test binary (the only
// way to see every allocation, the pool's worker threads included); the counter is global
// because operator new is. It counts only while a test switches it on.

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#include "model/backend.hpp"
#include "model/forward.hpp"
#include "model/sampling.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/model/tiny_model.hpp"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

}  // namespace

namespace {

void* counted_alloc(std::size_t n, std::size_t align) noexcept {
    if (g_counting.load(std::memory_order_relaxed)) {
        g_allocations.fetch_add(1, std::memory_order_relaxed);
    }
    if (n == 0) n = 1;
    if (align <= alignof(std::max_align_t)) return std::malloc(n);
    return std::aligned_alloc(align, (n + align - 1) / align * align);
}

}  // namespace

// Every replaceable form (plain, array, nothrow, aligned), all from malloc: a form left out
// would come from the runtime's own operator new (AddressSanitizer's, in a sanitizer build)
// and be freed here, and aligned ones (the pool's cache-line lanes) would not be counted.
void* operator new(std::size_t n) {
    if (void* p = counted_alloc(n, 0)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
// GCC pairs `operator new` with `operator delete` wherever it inlines one of these, and takes
// the free below for a mismatch: both are this file's, from malloc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace brigade::model {
namespace {

// Counts the allocations made while it lives.
class AllocationCounter {
public:
    AllocationCounter() {
        g_allocations.store(0);
        g_counting.store(true);
    }
    ~AllocationCounter() { g_counting.store(false); }
    long count() const { return g_allocations.load(); }
};

TEST(DecodeAllocation, SteadyStateDecodeStepsAndSamplingAllocateNothing) {
    for (const int bits : {0, 4}) {
        SCOPED_TRACE(bits == 0 ? "BF16" : "MLX 4-bit");
        test::TinyModelSpec spec;
        spec.model_type = "qwen2";
        spec.dtype = "BF16";
        spec.bits = bits;
        spec.layers = 2;
        // Three chunks of the sampler's whole-row passes, which then run on the pool.
        spec.vocab = 40000;
        test::TempDir dir;
        test::write_tiny_model(dir.path(), spec);
        BackendOptions options;
        options.n_threads = 3;
        auto backend = make_backend(BackendKind::kCpu, options).value();
        auto stage = Stage::load(dir.path(), {0, spec.layers}, *backend).value();

        // Prompts of 8 tokens for sequences 1 and 2 (allocating is fine here).
        const std::vector<std::int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
        std::vector<std::int32_t> generated;
        generated.reserve(64);
        for (std::uint64_t seq : {1, 2}) {
            SequenceBatchEntry e;
            e.seq_id = seq;
            e.tokens = prompt;
            e.n_tokens = static_cast<std::int32_t>(prompt.size());
            ASSERT_TRUE(stage->run_layers({e}));
        }

        SamplingParams sampling;
        sampling.temperature = 0.8f;
        sampling.top_p = 0.9f;
        sampling.seed = 5;
        Sampler sampler;
        std::vector<SampledToken> top;  // top_logprobs, reused
        StageOutput out;
        std::vector<SequenceBatchEntry> one(1);
        std::vector<SequenceBatchEntry> two(2);
        std::int32_t next = 7;
        std::int32_t pos[2] = {8, 8};
        // One decode step of `batch` (sequences 1 and, for a pair, 2), then a token sampled
        // from the first sequence's logits.
        auto step = [&](std::vector<SequenceBatchEntry>& batch) {
            for (std::size_t i = 0; i < batch.size(); ++i) {
                batch[i].seq_id = i + 1;
                batch[i].pos0 = pos[i]++;
                batch[i].n_tokens = 1;
                batch[i].tokens.assign(1, next);
            }
            if (!stage->run_layers(batch, {}, out)) return false;
            const TokenHistory history{prompt, generated};
            next = sampler
                       .sample(out.last_row(0, batch[0]), sampling, history,
                               static_cast<std::uint64_t>(generated.size()), backend.get())
                       .token;
            sampler.most_likely(5, top);
            generated.push_back(next);
            return true;
        };
        for (int i = 0; i < 3; ++i) {  // warm-up: buffers grow to their steady size
            ASSERT_TRUE(step(one));
            ASSERT_TRUE(step(two));
        }
        long allocations = 0;
        {
            AllocationCounter counter;
            for (int i = 0; i < 8; ++i) {
                if (!step(one) || !step(two)) break;
            }
            allocations = counter.count();
        }
        EXPECT_EQ(generated.size(), 22u);  // every step ran
        EXPECT_EQ(allocations, 0) << "heap allocations in 16 steady-state decode steps";
    }
}

}  // namespace
}  // namespace brigade::model
