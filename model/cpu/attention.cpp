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

#if HWY_TARGET != HWY_SCALAR
using D4 = hn::Full128<float>;

// The 128-bit blocks of v summed into one 4-lane vector.
template <class D>
HWY_INLINE hn::Vec<D4> sum_blocks(D d, hn::Vec<D> v) {
    if constexpr (hn::MaxLanes(D()) <= 4) {
        (void)d;
        return v;
    } else {
        const hn::Half<D> dh;
        return sum_blocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
    }
}

// out[i] = scale * dot(q, k + i * stride) for 4 keys. The four products are reduced together
// (two interleave rounds leave each block holding the 4 partial sums side by side, then the
// blocks are added): about a third of the shuffles of four separate horizontal sums, which
// dominated QKᵀ at decode.
HWY_INLINE void dot4(const float* q, const float* k, std::int64_t stride, std::int64_t d,
                     float scale, float* out) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    auto p0 = hn::Zero(df), p1 = hn::Zero(df), p2 = hn::Zero(df), p3 = hn::Zero(df);
    std::int64_t c = 0;
    for (; c + n <= d; c += n) {
        const auto qv = hn::LoadU(df, q + c);
        p0 = hn::MulAdd(qv, hn::LoadU(df, k + c), p0);
        p1 = hn::MulAdd(qv, hn::LoadU(df, k + stride + c), p1);
        p2 = hn::MulAdd(qv, hn::LoadU(df, k + 2 * stride + c), p2);
        p3 = hn::MulAdd(qv, hn::LoadU(df, k + 3 * stride + c), p3);
    }
    const auto t0 = hn::Add(hn::InterleaveLower(df, p0, p1), hn::InterleaveUpper(df, p0, p1));
    const auto t1 = hn::Add(hn::InterleaveLower(df, p2, p3), hn::InterleaveUpper(df, p2, p3));
    const hn::Repartition<std::uint64_t, DF> du;
    const auto u0 = hn::BitCast(du, t0);
    const auto u1 = hn::BitCast(du, t1);
    const auto sums = hn::Add(hn::BitCast(df, hn::InterleaveLower(du, u0, u1)),
                              hn::BitCast(df, hn::InterleaveUpper(du, u0, u1)));
    const D4 d4;
    hn::StoreU(hn::Mul(sum_blocks(df, sums), hn::Set(d4, scale)), d4, out);
    for (; c < d; ++c) {
        for (int i = 0; i < 4; ++i) out[i] += scale * (q[c] * k[i * stride + c]);
    }
}
#endif

// acc[0..d) = acc * keep + Σ_j p[j] * v_j for `count` value rows v_j = v0 + j * stride.
// The output stays in registers for a chunk of 4 vectors while every key of the block is
// added, so acc is loaded and stored once per block, not once per key.
HWY_INLINE void accumulate_values(float* HWY_RESTRICT acc, float keep, const float* p,
                                  const float* v0, std::int64_t stride, std::int64_t count,
                                  std::int64_t d) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto vk = hn::Set(df, keep);
    std::int64_t c = 0;
    for (; c + 4 * n <= d; c += 4 * n) {
        auto a0 = hn::Mul(hn::LoadU(df, acc + c), vk);
        auto a1 = hn::Mul(hn::LoadU(df, acc + c + n), vk);
        auto a2 = hn::Mul(hn::LoadU(df, acc + c + 2 * n), vk);
        auto a3 = hn::Mul(hn::LoadU(df, acc + c + 3 * n), vk);
        const float* v = v0 + c;
        for (std::int64_t j = 0; j < count; ++j, v += stride) {
            const auto pj = hn::Set(df, p[j]);
            a0 = hn::MulAdd(pj, hn::LoadU(df, v), a0);
            a1 = hn::MulAdd(pj, hn::LoadU(df, v + n), a1);
            a2 = hn::MulAdd(pj, hn::LoadU(df, v + 2 * n), a2);
            a3 = hn::MulAdd(pj, hn::LoadU(df, v + 3 * n), a3);
        }
        hn::StoreU(a0, df, acc + c);
        hn::StoreU(a1, df, acc + c + n);
        hn::StoreU(a2, df, acc + c + 2 * n);
        hn::StoreU(a3, df, acc + c + 3 * n);
    }
    for (; c + n <= d; c += n) {
        auto a0 = hn::Mul(hn::LoadU(df, acc + c), vk);
        const float* v = v0 + c;
        for (std::int64_t j = 0; j < count; ++j, v += stride) {
            a0 = hn::MulAdd(hn::Set(df, p[j]), hn::LoadU(df, v), a0);
        }
        hn::StoreU(a0, df, acc + c);
    }
    for (; c < d; ++c) {
        float a = acc[c] * keep;
        for (std::int64_t j = 0; j < count; ++j) a += p[j] * v0[j * stride + c];
        acc[c] = a;
    }
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
    const std::int64_t n_rows = tile.n_rows(group);
    const std::int64_t q_rows = (tile.q_end - tile.q_begin) * group;  // rows per KV head
    std::fill(m, m + n_rows, -INFINITY);
    std::fill(l, l + n_rows, 0.0f);
    std::fill(acc, acc + n_rows * d, 0.0f);
    const std::int64_t kv_stride = a.n_kv_heads * d;
    // Key blocks outermost: a block of every KV head of the tile (at most 64 keys x kv_dim
    // floats of K and of V) stays in L1/L2 while all of the tile's query rows use it.
    for (std::int64_t kb = tile.key_begin; kb < tile.key_end; kb += kAttentionKeyBlock) {
        const std::int64_t ke = std::min(kb + kAttentionKeyBlock, tile.key_end);
        for (std::int64_t kvh = tile.kv_head_begin; kvh < tile.kv_head_end; ++kvh) {
            const float* k0 = a.k + kb * kv_stride + kvh * d;
            const float* v0 = a.v + kb * kv_stride + kvh * d;
            for (std::int64_t qi = tile.q_begin; qi < tile.q_end; ++qi) {
                // Query qi sees keys [0, q_pos0 + qi + 1).
                const std::int64_t limit = std::min(ke, a.q_pos0 + qi + 1);
                if (limit <= kb) continue;
                const std::int64_t count = limit - kb;
                for (std::int64_t hh = 0; hh < group; ++hh) {
                    const std::int64_t h = kvh * group + hh;
                    const std::int64_t row =
                        (kvh - tile.kv_head_begin) * q_rows + (qi - tile.q_begin) * group + hh;
                    const float* q = a.q + (qi * a.n_heads + h) * d;
                    float block_max = -INFINITY;
                    std::int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
                    for (; j + 4 <= count; j += 4) {
                        dot4(q, k0 + j * kv_stride, kv_stride, d, a.scale, scores + j);
                    }
#endif
                    for (; j < count; ++j) scores[j] = dot(q, k0 + j * kv_stride, d) * a.scale;
                    for (j = 0; j < count; ++j) block_max = std::max(block_max, scores[j]);
                    const float m_new = std::max(m[row], block_max);
                    const float keep = std::exp(m[row] - m_new);  // 0 on the first block
                    const float block_sum = exp_shifted(scores, count, m_new);
                    l[row] = l[row] * keep + block_sum;
                    m[row] = m_new;
                    accumulate_values(acc + row * d, keep, scores, v0, kv_stride, count, d);
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
