// Attention kernel of the CPU backend (Highway, one instantiation per target).
//
// One call handles the query heads that share a KV head (GQA) for a range of queries against
// a range of keys, with an online softmax over blocks of `kAttentionKeyBlock` keys: each key
// block is loaded once and used by every query row of the group while it sits in L1, and no
// [n_q, n_kv] score matrix is ever materialised. The caller may split the keys of a long
// context over several tiles (split-K) and merge the partial (max, sum, output) triples.

#include <algorithm>
#include <cmath>

#include "model/cpu/kernels.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu/attention.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

HWY_INLINE float dot(const float* a, const float* b, std::int64_t d) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    auto s0 = hn::Zero(df);
    auto s1 = hn::Zero(df);
    std::int64_t j = 0;
    for (; j + 2 * n <= d; j += 2 * n) {
        s0 = hn::MulAdd(hn::LoadU(df, a + j), hn::LoadU(df, b + j), s0);
        s1 = hn::MulAdd(hn::LoadU(df, a + j + n), hn::LoadU(df, b + j + n), s1);
    }
    for (; j + n <= d; j += n) s0 = hn::MulAdd(hn::LoadU(df, a + j), hn::LoadU(df, b + j), s0);
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
    for (; j < d; ++j) s += a[j] * b[j];
    return s;
}

// acc[0..d) = acc * keep + p * v
HWY_INLINE void scale_add(float* acc, float keep, float p, const float* v, std::int64_t d) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto vk = hn::Set(df, keep);
    const auto vp = hn::Set(df, p);
    std::int64_t j = 0;
    for (; j + n <= d; j += n) {
        const auto a = hn::Mul(hn::LoadU(df, acc + j), vk);
        hn::StoreU(hn::MulAdd(hn::LoadU(df, v + j), vp, a), df, acc + j);
    }
    for (; j < d; ++j) acc[j] = acc[j] * keep + p * v[j];
}

// scores[0..n) = exp(scores - m); returns their sum.
HWY_INLINE float exp_shifted(float* scores, std::int64_t count, float m) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto vm = hn::Set(df, m);
    auto sum = hn::Zero(df);
    std::int64_t j = 0;
    for (; j + n <= count; j += n) {
        const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, scores + j), vm));
        hn::StoreU(e, df, scores + j);
        sum = hn::Add(sum, e);
    }
    float s = hn::GetLane(hn::SumOfLanes(df, sum));
    for (; j < count; ++j) {
        scores[j] = std::exp(scores[j] - m);
        s += scores[j];
    }
    return s;
}

void AttentionTileKernel(const AttentionArgs& a, const AttentionTile& tile, float* m, float* l,
                         float* acc, float* scores) {
    const std::int64_t group = a.n_heads / a.n_kv_heads;
    const std::int64_t d = a.head_dim;
    const std::int64_t n_rows = (tile.q_end - tile.q_begin) * group;
    std::fill(m, m + n_rows, -INFINITY);
    std::fill(l, l + n_rows, 0.0f);
    std::fill(acc, acc + n_rows * d, 0.0f);
    const std::int64_t kv_stride = a.n_kv_heads * d;
    for (std::int64_t kb = tile.key_begin; kb < tile.key_end; kb += kAttentionKeyBlock) {
        const std::int64_t ke = std::min(kb + kAttentionKeyBlock, tile.key_end);
        for (std::int64_t qi = tile.q_begin; qi < tile.q_end; ++qi) {
            // Query qi sees keys [0, q_pos0 + qi + 1).
            const std::int64_t limit = std::min(ke, a.q_pos0 + qi + 1);
            if (limit <= kb) continue;
            const std::int64_t count = limit - kb;
            for (std::int64_t hh = 0; hh < group; ++hh) {
                const std::int64_t h = tile.kv_head * group + hh;
                const std::int64_t row = (qi - tile.q_begin) * group + hh;
                const float* q = a.q + (qi * a.n_heads + h) * d;
                float block_max = -INFINITY;
                for (std::int64_t j = 0; j < count; ++j) {
                    const float* k = a.k + (kb + j) * kv_stride + tile.kv_head * d;
                    scores[j] = dot(q, k, d) * a.scale;
                    block_max = std::max(block_max, scores[j]);
                }
                const float m_new = std::max(m[row], block_max);
                const float keep = std::exp(m[row] - m_new);  // 0 on the first block
                const float block_sum = exp_shifted(scores, count, m_new);
                l[row] = l[row] * keep + block_sum;
                m[row] = m_new;
                float* out = acc + row * d;
                const float* v0 = a.v + kb * kv_stride + tile.kv_head * d;
                scale_add(out, keep, scores[0], v0, d);
                for (std::int64_t j = 1; j < count; ++j) {
                    scale_add(out, 1.0f, scores[j], v0 + j * kv_stride, d);
                }
            }
        }
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model::cpu {

HWY_EXPORT(AttentionTileKernel);

void attention_tile(const AttentionArgs& args, const AttentionTile& tile, float* m, float* l,
                    float* acc, float* scores) {
    HWY_DYNAMIC_DISPATCH(AttentionTileKernel)(args, tile, m, l, acc, scores);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
