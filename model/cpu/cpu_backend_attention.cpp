// Attention of the CPU backend: the tiling of one sequence's attention over the pool (query
// blocks, KV heads, key splits), and a decode batch's sequences in one parallel region.
//
// A decode batch used to pay one fork-join (two with key splits) per sequence and layer: 16
// sequences of a 24-layer model, 384-768 regions per step, each a few microseconds of waking
// threads for a few microseconds of work. attention_many plans every sequence exactly as a
// single call would (same tiles, same splits, so the same floats) and runs all their tiles in
// one region and all their merges in a second.

#include <algorithm>
#include <cmath>

#include "model/cpu/cpu_backend.hpp"
#include "model/cpu/kernels.hpp"

namespace brigade::model::cpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

CpuBackend::AttentionPlan CpuBackend::plan_attention(const AttentionArgs& a) const {
    AttentionPlan p;
    p.args = &a;
    p.group = a.n_heads / a.n_kv_heads;
    const std::int64_t n_threads = pool_.size();
    // Query blocks: enough work items for every thread, at most 32 queries each so a tile's
    // rows stay in L1/L2 while a key block is reused across them.
    p.q_block = std::clamp<std::int64_t>(ceil_div(a.n_q * a.n_kv_heads, 4 * n_threads), 1, 32);
    p.n_q_blocks = ceil_div(a.n_q, p.q_block);
    // One query block (decode, short chunks): a tile takes every KV head of a key range (or,
    // at short contexts, a contiguous run of them), so each thread streams one contiguous
    // slice of the cache instead of every n_kv_heads-th run of it, and the keys are split over
    // the threads. Otherwise one KV head per tile.
    p.heads_per_tile = p.n_q_blocks == 1 ? a.n_kv_heads : 1;
    // Splits keep at least min_keys_per_split keys each (see CpuTuning).
    const std::int64_t min_keys = std::max<std::int64_t>(
        kAttentionSplitAlign, tuning_.attention_fewer_heads_per_tile
                                  ? tuning_.min_keys_per_split
                                  : tuning_.min_keys_per_split / p.heads_per_tile);
    const std::int64_t max_splits = std::max<std::int64_t>(1, a.n_kv / min_keys);
    if (tuning_.attention_fewer_heads_per_tile && p.n_q_blocks == 1) {
        // Halving keeps the heads per tile a divisor of the KV heads.
        while (p.heads_per_tile % 2 == 0 &&
               a.n_kv_heads / p.heads_per_tile * max_splits < 2 * n_threads) {
            p.heads_per_tile /= 2;
        }
    }
    p.n_head_groups = a.n_kv_heads / p.heads_per_tile;
    p.n_items = p.n_head_groups * p.n_q_blocks;
    p.n_splits = 1;
    if (p.n_items < 2 * n_threads) {
        // Splits come in a multiple of the thread count where the context allows, so the
        // threads finish together.
        // About two splits per thread; long contexts more, while each keeps min_keys_per_long_split
        // keys, so a thread slowed by its hyperthread sibling holds up the step by less.
        std::int64_t want = ceil_div(2 * n_threads, p.n_items);
        const std::int64_t long_splits =
            std::min(ceil_div(tuning_.long_context_splits_per_thread * n_threads, p.n_items),
                     a.n_kv / std::max<std::int64_t>(1, tuning_.min_keys_per_long_split));
        want = std::max(want, long_splits);
        p.n_splits = std::clamp<std::int64_t>(max_splits, 1, want);
        if (p.n_splits * p.n_items > n_threads) {
            p.n_splits = std::max<std::int64_t>(
                1, p.n_splits * p.n_items / n_threads * n_threads / p.n_items);
        }
    }
    p.tile_rows = p.heads_per_tile * p.q_block * p.group;
    p.tile_floats = p.tile_rows * (a.head_dim + 2);
    return p;
}

AttentionTile CpuBackend::AttentionPlan::tile(std::int64_t item, std::int64_t split) const {
    const AttentionArgs& a = *args;
    AttentionTile t;
    // Later query blocks see more keys: hand them out first so the tail is short.
    const std::int64_t qb = n_q_blocks - 1 - item / n_head_groups;
    t.kv_head_begin = (item % n_head_groups) * heads_per_tile;
    t.kv_head_end = t.kv_head_begin + heads_per_tile;
    t.q_begin = qb * q_block;
    t.q_end = std::min(a.n_q, t.q_begin + q_block);
    const std::int64_t visible = std::clamp<std::int64_t>(a.q_pos0 + t.q_end, 0, a.n_kv);
    // Equal shares of the visible keys, boundaries on multiples of kAttentionSplitAlign (the
    // kernel takes keys 4 at a time). Shares rounded up to whole 64-key blocks left splits
    // empty: 530 positions in 16 splits ran on 9 threads, in 32 splits on 17 tasks for 16
    // threads.
    auto boundary = [&](std::int64_t s) {
        if (s >= n_splits) return visible;
        return s * visible / n_splits / kAttentionSplitAlign * kAttentionSplitAlign;
    };
    t.key_begin = boundary(split);
    t.key_end = boundary(split + 1);
    return t;
}

float* CpuBackend::AttentionPlan::out_row(const AttentionTile& t, std::int64_t row) const {
    // Row r of a tile is (KV head, query, head in the group), as attention_tile lays them out.
    const AttentionArgs& a = *args;
    const std::int64_t q_rows = (t.q_end - t.q_begin) * group;
    const std::int64_t kvh = t.kv_head_begin + row / q_rows;
    const std::int64_t qi = t.q_begin + row % q_rows / group;
    const std::int64_t h = kvh * group + row % group;
    return a.out + (qi * a.n_heads + h) * a.head_dim;
}

void CpuBackend::AttentionPlan::normalize(const AttentionTile& t, const float* l,
                                          const float* acc) const {
    // Writes acc / l into `out` for the tile's rows (0 where a query sees no key).
    const std::int64_t d = args->head_dim;
    for (std::int64_t row = 0; row < t.n_rows(group); ++row) {
        float* out = out_row(t, row);
        const float inv = l[row] > 0.0f ? 1.0f / l[row] : 0.0f;
        for (std::int64_t c = 0; c < d; ++c) out[c] = acc[row * d + c] * inv;
    }
}

void CpuBackend::AttentionPlan::merge(const float* all_partials, std::int64_t item,
                                      std::int64_t row_begin, std::int64_t row_end,
                                      float* work) const {
    // Rescales every split's partial of a row to the common max and sums them, split after
    // split, so a row's floats do not depend on how rows are grouped into tasks. The running
    // max, sum and output stay in this thread's registers and `work`: tasks on other threads
    // merge the neighbouring rows, whose m and l share cache lines with this row's.
    const AttentionTile tile = this->tile(item, 0);
    row_end = std::min(row_end, tile.n_rows(group));
    const std::int64_t d = args->head_dim;
    const float* first = all_partials + partials + item * n_splits * tile_floats;
    for (std::int64_t row = row_begin; row < row_end; ++row) {
        float m = first[row];
        float l = first[tile_rows + row];
        std::copy_n(first + 2 * tile_rows + row * d, d, work);
        for (std::int64_t s = 1; s < n_splits; ++s) {
            const float* ms = first + s * tile_floats;
            const float* ls = ms + tile_rows;
            const float* accs = ls + tile_rows + row * d;
            if (ls[row] == 0.0f) continue;
            const float m_new = std::max(m, ms[row]);
            const float k0 = std::exp(m - m_new);  // 0 if m is -inf
            const float ks = std::exp(ms[row] - m_new);
            l = l * k0 + ls[row] * ks;
            for (std::int64_t c = 0; c < d; ++c) work[c] = work[c] * k0 + accs[c] * ks;
            m = m_new;
        }
        float* out = out_row(tile, row);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (std::int64_t c = 0; c < d; ++c) out[c] = work[c] * inv;
    }
}

void CpuBackend::attention(const AttentionArgs& a) { attention_many({&a, 1}); }

void CpuBackend::attention_many(std::span<const AttentionArgs> batch) {
    // Plans, and where each sequence's tasks and split partials start.
    attention_plans_.clear();
    std::int64_t n_tasks = 0;
    std::int64_t n_merges = 0;
    std::int64_t partial_floats = 0;
    std::int64_t max_tile_floats = 0;
    std::int64_t max_head_dim = 0;
    for (const AttentionArgs& a : batch) {
        if (a.n_q <= 0 || a.n_heads <= 0 || a.n_kv_heads <= 0) continue;
        AttentionPlan p = plan_attention(a);
        p.first_task = n_tasks;
        p.first_merge = n_merges;
        p.partials = partial_floats;
        n_tasks += p.n_items * p.n_splits;
        if (p.n_splits > 1) {
            // The merge reads every split's partial of a row: one thread merging all rows
            // of a decode step (32 splits x 32 rows of 66 floats for Llama-3.2-1B) took
            // longer than the tiles, so rows are spread over about one task per thread.
            p.merge_rows = std::max<std::int64_t>(
                1, ceil_div(p.n_items * p.tile_rows, static_cast<std::int64_t>(pool_.size())));
            p.merge_rows = std::min(p.merge_rows, p.tile_rows);
            p.merges_per_item = ceil_div(p.tile_rows, p.merge_rows);
            n_merges += p.n_items * p.merges_per_item;
            partial_floats += p.n_items * p.n_splits * p.tile_floats;
        }
        max_tile_floats = std::max(max_tile_floats, p.tile_floats);
        max_head_dim = std::max(max_head_dim, a.head_dim);
        attention_plans_.push_back(p);
    }
    if (attention_plans_.empty()) return;
    reserve_scratch(
        static_cast<std::size_t>(max_tile_floats + attention_scratch_floats(max_head_dim)));
    if (attention_partials_.size() < static_cast<std::size_t>(partial_floats)) {
        attention_partials_.resize(static_cast<std::size_t>(partial_floats));
    }

    // The plan a flattened task or merge index falls in (plans are in index order).
    auto plan_of = [&](std::int64_t index, auto first) -> const AttentionPlan& {
        auto it =
            std::upper_bound(attention_plans_.begin(), attention_plans_.end(), index,
                             [&](std::int64_t i, const AttentionPlan& p) { return i < first(p); });
        return *(it - 1);
    };
    const AttentionPrefetch prefetch{tuning_.attention_prefetch_heads,
                                     tuning_.attention_stream_prefetch_keys};
    pool_.parallel_for(n_tasks, [&](std::int64_t task, int thread) {
        const AttentionPlan& p = plan_of(task, [](const AttentionPlan& q) { return q.first_task; });
        const std::int64_t local = task - p.first_task;
        const std::int64_t item = local / p.n_splits;
        const std::int64_t split = local % p.n_splits;
        const AttentionTile tile = p.tile(item, split);
        float* own = scratch_[static_cast<std::size_t>(thread)].data();
        float* base =
            p.n_splits > 1 ? attention_partials_.data() + p.partials + local * p.tile_floats : own;
        float* m = base;
        float* l = m + p.tile_rows;
        float* acc = l + p.tile_rows;
        float* scores = own + max_tile_floats;
        attention_tile(*p.args, tile, m, l, acc, scores, prefetch);
        if (p.n_splits == 1) p.normalize(tile, l, acc);
    });
    if (n_merges == 0) return;

    auto merge = [&](std::int64_t index, int thread) {
        // Plans without splits hold the next plan's first_merge, so the last plan whose
        // first_merge is <= index is the one with splits that owns it.
        const AttentionPlan& p =
            plan_of(index, [](const AttentionPlan& q) { return q.first_merge; });
        const std::int64_t local = index - p.first_merge;
        const std::int64_t row0 = local % p.merges_per_item * p.merge_rows;
        p.merge(attention_partials_.data(), local / p.merges_per_item, row0, row0 + p.merge_rows,
                scratch_[static_cast<std::size_t>(thread)].data());
    };
    if (n_merges == 1) {
        merge(0, 0);
    } else {
        pool_.parallel_for(n_merges, merge);
    }
}

}  // namespace brigade::model::cpu
