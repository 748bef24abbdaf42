// Attention kernel of the CPU backend (Highway, one instantiation per target).
//
// One call handles the query heads that share a KV head (GQA) for a range of queries against
// a range of keys, with an online softmax over blocks of `kAttentionKeyBlock` keys: each key
// block is loaded once and used by every query row of the group while it sits in L1, and no
// [n_q, n_kv] score matrix is ever materialised. The caller may split the keys of a long
// context over several tiles (split-K) and merge the partial (max, sum, output) triples.
//
// Keys and values are f32 or f16 (the KV cache's default), keys in rows or in tiles
// (KeyLayout; the cache tiles its f16 keys). Tiled keys give each query row a vector of scores
// from FMAs alone, every key vector converted once and used by all rows of the group; f16 key
// rows are widened to f32 in scratch first, once per block, as each row would otherwise convert
// them again (7 times for Qwen2.5-0.5B). Values are rows, converted as they are loaded: each
// value vector serves up to 4 rows, and widening them into scratch first cost more than the
// conversions it saved (session 15: Qwen2.5-0.5B's attention from cache 20 -> 27 GB/s here).
//
// Decode tiles ask for the K and V lines a fixed number of keys ahead of each load
// (AttentionPrefetch::stream_keys): the hardware prefetchers alone left each thread waiting on
// memory between its computations (session 41).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "model/cpu/kernels.hpp"
#include "model/cpu/weight_decode.hpp"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu/attention.cpp"
#include "model/cpu/simd_targets.hpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
#include "model/cpu/decode-inl.hpp"
#include "model/cpu/vector_max-inl.hpp"
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

// out[0..4) = scale * (the lane sums of p0..p3). The four sums are reduced together (two
// interleave rounds leave each block holding the 4 partial sums side by side, then the blocks
// are added): about a third of the shuffles of four separate horizontal sums, which dominated
// QKᵀ at decode.
HWY_INLINE void store_sums4(hn::Vec<DF> p0, hn::Vec<DF> p1, hn::Vec<DF> p2, hn::Vec<DF> p3,
                            float scale, float* out) {
    const DF df;
    const auto t0 = hn::Add(hn::InterleaveLower(df, p0, p1), hn::InterleaveUpper(df, p0, p1));
    const auto t1 = hn::Add(hn::InterleaveLower(df, p2, p3), hn::InterleaveUpper(df, p2, p3));
    const hn::Repartition<std::uint64_t, DF> du;
    const auto u0 = hn::BitCast(du, t0);
    const auto u1 = hn::BitCast(du, t1);
    const auto sums = hn::Add(hn::BitCast(df, hn::InterleaveLower(du, u0, u1)),
                              hn::BitCast(df, hn::InterleaveUpper(du, u0, u1)));
    const D4 d4;
    hn::StoreU(hn::Mul(sum_blocks(df, sums), hn::Set(d4, scale)), d4, out);
}

// out[i] = scale * dot(q, k + i * stride) for 4 keys.
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
    store_sums4(p0, p1, p2, p3, scale, out);
    for (; c < d; ++c) {
        for (int i = 0; i < 4; ++i) out[i] += scale * (q[c] * k[i * stride + c]);
    }
}

// dot4 for R query rows of a GQA group against the same 4 keys (row r's query at q + r * d,
// its 4 scores at out + r * out_stride): each key vector is loaded once for all R rows. Every
// product, chain and reduction is dot4's, so each row gets dot4's floats.
template <int R>
HWY_INLINE void dot4_rows(const float* q, const float* k, std::int64_t stride, std::int64_t d,
                          float scale, float* out, std::int64_t out_stride) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    hn::Vec<DF> p[R][4];
    for (int r = 0; r < R; ++r) {
        for (int i = 0; i < 4; ++i) p[r][i] = hn::Zero(df);
    }
    std::int64_t c = 0;
    for (; c + n <= d; c += n) {
        const auto k0 = hn::LoadU(df, k + c);
        const auto k1 = hn::LoadU(df, k + stride + c);
        const auto k2 = hn::LoadU(df, k + 2 * stride + c);
        const auto k3 = hn::LoadU(df, k + 3 * stride + c);
        for (int r = 0; r < R; ++r) {
            const auto qv = hn::LoadU(df, q + r * d + c);
            p[r][0] = hn::MulAdd(qv, k0, p[r][0]);
            p[r][1] = hn::MulAdd(qv, k1, p[r][1]);
            p[r][2] = hn::MulAdd(qv, k2, p[r][2]);
            p[r][3] = hn::MulAdd(qv, k3, p[r][3]);
        }
    }
    for (int r = 0; r < R; ++r) {
        store_sums4(p[r][0], p[r][1], p[r][2], p[r][3], scale, out + r * out_stride);
    }
    for (; c < d; ++c) {
        for (int r = 0; r < R; ++r) {
            for (int i = 0; i < 4; ++i) {
                out[r * out_stride + i] += scale * (q[r * d + c] * k[i * stride + c]);
            }
        }
    }
}

// Query rows taken together by dot4_rows: 4 where the accumulators (16) and key vectors fit
// the 32 vector registers, else 2.
constexpr int kScoreRows = kVectorRegisters >= 32 ? 4 : 2;
#endif

// N floats of T at p (f16 widened).
template <class T>
HWY_INLINE hn::Vec<DF> load_floats(const T* p) {
    const DF df;
    if constexpr (std::is_same_v<T, float>) {
        return hn::LoadU(df, p);
    } else {
        const hn::Rebind<hwy::float16_t, DF> dh;
        return hn::PromoteTo(df, hn::LoadU(dh, p));
    }
}

// One element of T at p as a float.
template <class T>
HWY_INLINE float load_float(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
        return *p;
    } else {
        std::uint16_t bits;  // a struct on x86, __fp16 on Arm
        std::memcpy(&bits, p, sizeof bits);
        return f16_to_f32(bits);
    }
}

// Asks for the line `ahead` elements past p into L2. The address may lie past the cache's
// buffer (a prefetch never faults), so it is formed as an integer, not by pointer arithmetic.
template <class T>
HWY_INLINE void prefetch_ahead(const T* p, std::int64_t ahead) {
    const auto address =
        reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(ahead) * sizeof(T);
    __builtin_prefetch(reinterpret_cast<const void*>(address), 0, 2);
}

// Scores of R query rows (row r's query at q + r * d, its scores at out + r * out_stride)
// against the V * N keys from key `j0` on (a multiple of N, which divides kKeyTile: a vector
// never straddles two tiles), of one KV head of a tiled key block (KeyLayout::kTiles; `kt`
// points at the head's first element in tile 0, tiles are `tile_stride` elements apart). Element c
// of N consecutive keys is one vector load, so each row's N scores are a chain of d FMAs, and each
// key vector serves all R rows: no horizontal sums, no shuffles.
template <int R, int V, class T>
HWY_INLINE void score_key_tiles(const float* q, const T* kt, std::int64_t tile_stride,
                                std::int64_t j0, std::int64_t d, float scale, float* out,
                                std::int64_t out_stride, std::int64_t ahead) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const T* k[V];
    for (int v = 0; v < V; ++v) {
        const std::int64_t key = j0 + v * n;
        k[v] = kt + (key / kKeyTile) * tile_stride + key % kKeyTile;
    }
    hn::Vec<DF> acc[R][V];
    for (int r = 0; r < R; ++r) {
        for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
    }
    // Element c of a tile's keys is kKeyTile elements: a 64-byte line holds per_line of them.
    constexpr std::int64_t per_line =
        std::max<std::int64_t>(1, 64 / (kKeyTile * static_cast<std::int64_t>(sizeof(T))));
    for (std::int64_t c = 0; c < d; ++c) {
        hn::Vec<DF> kc[V];
        for (int v = 0; v < V; ++v) kc[v] = load_floats(k[v] + c * kKeyTile);
        if (ahead != 0 && (c & (per_line - 1)) == 0) {
            for (int v = 0; v < V; ++v) prefetch_ahead(k[v] + c * kKeyTile, ahead);
        }
        for (int r = 0; r < R; ++r) {
            const auto qc = hn::Set(df, q[r * d + c]);
            for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(qc, kc[v], acc[r][v]);
        }
    }
    const auto vs = hn::Set(df, scale);
    for (int r = 0; r < R; ++r) {
        for (int v = 0; v < V; ++v) {
            hn::StoreU(hn::Mul(acc[r][v], vs), df, out + r * out_stride + v * n);
        }
    }
}

// Query rows scored together from tiled keys: R rows x V vectors of accumulators plus the V
// key vectors fit the registers (at most 16 + 4 of 32, or 8 + 2 of 16).
constexpr int kTileRows = kVectorRegisters >= 32 ? 8 : 4;

// f(std::integral_constant<int, R>{}) for R = rows, 1..kTileRows.
template <class F>
HWY_INLINE void with_row_count(std::int64_t rows, F&& f) {
    if constexpr (kTileRows == 8) {
        with_constant(rows, std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>{}, f);
    } else {
        with_constant(rows, std::integer_sequence<int, 1, 2, 3, 4>{}, f);
    }
}

// score_key_tiles for the first `padded` keys (a multiple of kKeyTile) from key `kb` on:
// passes of V vectors where R x V accumulators fit, then one vector at a time.
template <int R, class T>
HWY_INLINE void score_key_block(const float* q, const T* kt, std::int64_t tile_stride,
                                std::int64_t kb, std::int64_t padded, std::int64_t d, float scale,
                                float* out, std::int64_t out_stride, std::int64_t ahead) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    constexpr int kV = std::max(1, (kVectorRegisters >= 32 ? 16 : 8) / R);
    constexpr int V = kV >= 4 ? 4 : kV;
    std::int64_t j = 0;
    for (; j + V * n <= padded; j += V * n) {
        score_key_tiles<R, V>(q, kt, tile_stride, kb + j, d, scale, out + j, out_stride, ahead);
    }
    for (; j < padded; j += n) {
        score_key_tiles<R, 1>(q, kt, tile_stride, kb + j, d, scale, out + j, out_stride, ahead);
    }
}

// Vectors of head_dim per pass of accumulate_values_rows for R rows: R x V accumulators plus
// the V value vectors stay in registers (at most 16 + 4 of 32, or 8 + 4 of 16).
template <int R>
constexpr int value_vectors() {
    constexpr int fit = (kVectorRegisters >= 32 ? 16 : 8) / R;
    return fit >= 4 ? 4 : fit >= 2 ? 2 : 1;
}

// acc_r[0..d) = acc_r * keep[r] + Σ_j p_r[j] * v_j for R rows (acc_r = acc + r * d, p_r =
// p + r * kAttentionKeyBlock) and `count` value rows v_j = v0 + j * stride. Each value vector
// is loaded once for all R rows (1 + R/V loads per FMA instead of 1.25), and every output
// element is still the same chain over j as for a single row.
template <int R, int V, class T>
HWY_INLINE std::int64_t accumulate_values_pass(float* HWY_RESTRICT acc, const float* keep,
                                               const float* p, const T* v0, std::int64_t stride,
                                               std::int64_t count, std::int64_t d, std::int64_t c,
                                               std::int64_t ahead) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));  // elements a line
    for (; c + V * n <= d; c += V * n) {
        hn::Vec<DF> a[R][V];
        for (int r = 0; r < R; ++r) {
            const auto vk = hn::Set(df, keep[r]);
            for (int i = 0; i < V; ++i)
                a[r][i] = hn::Mul(hn::LoadU(df, acc + r * d + c + i * n), vk);
        }
        const T* v = v0 + c;
        for (std::int64_t j = 0; j < count; ++j, v += stride) {
            hn::Vec<DF> vj[V];
            for (int i = 0; i < V; ++i) vj[i] = load_floats(v + i * n);
            for (std::int64_t e = 0; ahead != 0 && e < V * n; e += line) {
                prefetch_ahead(v + e, ahead);
            }
            for (int r = 0; r < R; ++r) {
                const auto pj = hn::Set(df, p[r * kAttentionKeyBlock + j]);
                for (int i = 0; i < V; ++i) a[r][i] = hn::MulAdd(pj, vj[i], a[r][i]);
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int i = 0; i < V; ++i) hn::StoreU(a[r][i], df, acc + r * d + c + i * n);
        }
    }
    return c;
}

template <int R, class T>
HWY_INLINE void accumulate_values_rows(float* HWY_RESTRICT acc, const float* keep, const float* p,
                                       const T* v0, std::int64_t stride, std::int64_t count,
                                       std::int64_t d, std::int64_t ahead) {
    std::int64_t c =
        accumulate_values_pass<R, value_vectors<R>()>(acc, keep, p, v0, stride, count, d, 0, ahead);
    c = accumulate_values_pass<R, 1>(acc, keep, p, v0, stride, count, d, c, ahead);
    for (; c < d; ++c) {
        for (int r = 0; r < R; ++r) {
            float a = acc[r * d + c] * keep[r];
            for (std::int64_t j = 0; j < count; ++j) {
                a += p[r * kAttentionKeyBlock + j] * load_float(v0 + j * stride + c);
            }
            acc[r * d + c] = a;
        }
    }
}

// e^x for x <= 0, within about 1 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor
// series to r^7 (truncation below 6e-9 relative), times 2^n built from the exponent bits.
// Arguments below -87 give e^-87 (~1.6e-38, the smallest normal range) instead of 0: as a
// softmax weight beside the maximum's 1 it is nothing. About two thirds of the instructions of
// a general exponential (no overflow, no subnormal results), which took a fifth of decode
// attention's time.
HWY_INLINE hn::Vec<DF> exp_nonpositive(hn::Vec<DF> x) {
    const DF df;
    const hn::RebindToSigned<DF> di;
    x = hn::Max(x, hn::Set(df, -87.0f));
    // n = x·log2(e) rounded to the nearest integer, ties to even, as a float and in the low
    // mantissa bits of `shifted`: adding 1.5 * 2^23 leaves no fraction bits (the same n as a
    // rounding conversion, in 2 operations where NearestInt's overflow fix-ups take 5).
    const auto shifter = hn::Set(df, 12582912.0f);
    const auto shifted = hn::Add(hn::Mul(x, hn::Set(df, 1.44269504088896341f)), shifter);
    const auto nf = hn::Sub(shifted, shifter);
    auto r = hn::MulAdd(nf, hn::Set(df, -0.693145751953125f), x);  // ln2's high bits, exact
    r = hn::MulAdd(nf, hn::Set(df, -1.428606765330187e-06f), r);   // and the rest
    auto p = hn::Set(df, 1.0f / 5040.0f);
    p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 720.0f));
    p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 120.0f));
    p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 24.0f));
    p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 6.0f));
    p = hn::MulAdd(p, r, hn::Set(df, 0.5f));
    p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
    p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
    // 2^n: the shifter's own bits (0x4B400000) shift out past bit 31, leaving (n + 127) << 23.
    const auto scale =
        hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, shifted), hn::Set(di, 127))));
    return hn::Mul(p, scale);
}

// Whether any of x[0..n) is above m.
HWY_INLINE bool any_above(const float* x, std::int64_t n, float m) {
    const DF df;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
    std::int64_t i = 0;
    if (n >= lanes) {
        auto vm = hn::LoadU(df, x);
        for (i = lanes; i + lanes <= n; i += lanes) vm = hn::Max(vm, hn::LoadU(df, x + i));
        if (!hn::AllFalse(df, hn::Gt(vm, hn::Set(df, m)))) return true;
    }
    for (; i < n; ++i) {
        if (x[i] > m) return true;
    }
    return false;
}

// scores[0..n) = exp(scores - m); returns their sum.
HWY_INLINE float exp_shifted(float* scores, std::int64_t count, float m) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    const auto vm = hn::Set(df, m);
    auto sum = hn::Zero(df);
    std::int64_t j = 0;
    for (; j + n <= count; j += n) {
        const auto e = exp_nonpositive(hn::Sub(hn::LoadU(df, scores + j), vm));
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

// Asks for the K and V rows of keys [begin, end) of KV heads [h0, h1) to be brought into L2. A
// short-context decode tile is a few dozen keys from a cache that the weights streamed out of
// memory since the last step, too short a run for the hardware prefetchers to ramp up. Only a
// tile's first block is asked for: prefetching every next block of a long context measured
// slower than the hardware prefetchers alone. The heads' part of each key tile (tiled keys) and
// of each row is one run; with every head the runs join into one contiguous range.
template <class T, bool kTiled>
HWY_INLINE void prefetch_keys(const AttentionArgs& a, std::int64_t h0, std::int64_t h1,
                              std::int64_t begin, std::int64_t end) {
    if (end <= begin) return;
    const auto size = static_cast<std::int64_t>(sizeof(T));
    const std::int64_t row = a.n_kv_heads * a.head_dim * size;  // bytes of a position
    const std::int64_t run = (h1 - h0) * a.head_dim * size;     // of it, the heads'
    const std::int64_t skip = h0 * a.head_dim * size;
    // `count` runs of `bytes`, `stride` apart, from `first`.
    const auto runs = [](const char* first, std::int64_t count, std::int64_t stride,
                         std::int64_t bytes) {
        if (bytes == stride) {
            for (std::int64_t off = 0; off < count * bytes; off += 64) {
                __builtin_prefetch(first + off, 0, 2);
            }
            return;
        }
        for (std::int64_t i = 0; i < count; ++i) {
            for (std::int64_t off = 0; off < bytes; off += 64) {
                __builtin_prefetch(first + i * stride + off, 0, 2);
            }
        }
    };
    const auto* k = static_cast<const char*>(a.k);
    const auto* v = static_cast<const char*>(a.v);
    if constexpr (kTiled) {
        const std::int64_t t0 = begin / kKeyTile;
        const std::int64_t t1 = (end + kKeyTile - 1) / kKeyTile;
        runs(k + (t0 * row + skip) * kKeyTile, t1 - t0, row * kKeyTile, run * kKeyTile);
    } else {
        runs(k + begin * row + skip, end - begin, row, run);
    }
    runs(v + begin * row + skip, end - begin, row, run);
}

// Asks for the K and V rows of KV head `kvh` for keys [begin, end) to be brought into L2. A
// decode tile reads one head of a key block at a time: head_dim floats every kv_stride floats
// (every 2 KiB for Llama-3.2-1B), a stride the hardware prefetchers barely follow, so each pass
// over a head waited on its misses one after another (perf on the lent Xeon: most of the
// kernel's samples on the loads of K and V at 32k positions). Asking for the next head's rows
// while this one computes puts those misses in flight together.
// Tiled keys are not asked for: a head's part of a tile is one contiguous run (2 KiB at
// head_dim 64 in f16) that the hardware prefetchers follow, and asking for it too measured
// slower (session 15: Llama-3.2-1B's attention at 32k, 18 against 21 GB/s here).
template <class T, bool kTiled>
HWY_INLINE void prefetch_head(const AttentionArgs& a, std::int64_t kvh, std::int64_t begin,
                              std::int64_t end) {
    const std::int64_t kv_stride = a.n_kv_heads * a.head_dim;
    const std::int64_t bytes = a.head_dim * static_cast<std::int64_t>(sizeof(T));
    const auto* k_base = static_cast<const T*>(a.k);
    const auto* v_base = static_cast<const T*>(a.v);
    for (std::int64_t j = begin; j < end; ++j) {
        const auto* v = reinterpret_cast<const char*>(v_base + j * kv_stride + kvh * a.head_dim);
        for (std::int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(v + off, 0, 2);
        if constexpr (!kTiled) {
            const auto* k =
                reinterpret_cast<const char*>(k_base + j * kv_stride + kvh * a.head_dim);
            for (std::int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(k + off, 0, 2);
        }
    }
}

// dst[j * d + c] = src[j * stride + c] widened to f32, for `count` rows of d halves.
HWY_INLINE void widen_rows(const hwy::float16_t* src, std::int64_t stride, std::int64_t count,
                           std::int64_t d, float* HWY_RESTRICT dst) {
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    for (std::int64_t j = 0; j < count; ++j) {
        const hwy::float16_t* row = src + j * stride;
        float* out = dst + j * d;
        std::int64_t c = 0;
        for (; c + n <= d; c += n) hn::StoreU(load_floats(row + c), df, out + c);
        for (; c < d; ++c) out[c] = load_float(row + c);
    }
}

// Scores of `rows` query rows (row r's query at q + r * d) against `count` keys in rows
// (key j at k0 + j * stride): row r's at scores + r * kAttentionKeyBlock. Rows go together
// where the registers allow, sharing each key load; the same floats as one by one.
HWY_INLINE void score_key_rows(const float* q, std::int64_t rows, const float* k0,
                               std::int64_t stride, std::int64_t count, std::int64_t d, float scale,
                               float* scores) {
    std::int64_t rq = 0;
#if HWY_TARGET != HWY_SCALAR
    auto score_rows = [&](auto n_rows) BRIGADE_INLINE_LAMBDA {
        constexpr int kRows = decltype(n_rows)::value;
        for (; rq + kRows <= rows; rq += kRows) {
            const float* qr = q + rq * d;
            float* sr = scores + rq * kAttentionKeyBlock;
            std::int64_t j = 0;
            for (; j + 4 <= count; j += 4) {
                dot4_rows<kRows>(qr, k0 + j * stride, stride, d, scale, sr + j, kAttentionKeyBlock);
            }
            for (; j < count; ++j) {
                for (int r = 0; r < kRows; ++r) {
                    sr[r * kAttentionKeyBlock + j] = dot(qr + r * d, k0 + j * stride, d) * scale;
                }
            }
        }
    };
    score_rows(std::integral_constant<int, kScoreRows>{});
    score_rows(std::integral_constant<int, 2>{});
#endif
    for (; rq < rows; ++rq) {
        const float* qr = q + rq * d;
        float* s = scores + rq * kAttentionKeyBlock;
        std::int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
        for (; j + 4 <= count; j += 4) dot4(qr, k0 + j * stride, stride, d, scale, s + j);
#endif
        for (; j < count; ++j) s[j] = dot(qr, k0 + j * stride, d) * scale;
    }
}

// score_key_rows for tiled keys (score_key_block) from key `kb` (a multiple of kKeyTile) on.
// Whole tiles are scored: scores past `count` are computed and never read.
template <class T>
HWY_INLINE void score_tiled_keys(const float* q, std::int64_t rows, const T* kt,
                                 std::int64_t tile_stride, std::int64_t kb, std::int64_t count,
                                 std::int64_t d, float scale, float* scores, std::int64_t ahead) {
    const std::int64_t padded = (count + kKeyTile - 1) / kKeyTile * kKeyTile;
    for (std::int64_t rq = 0; rq < rows; rq += kTileRows) {
        auto score = [&](auto n_rows) BRIGADE_INLINE_LAMBDA {
            score_key_block<decltype(n_rows)::value>(q + rq * d, kt, tile_stride, kb, padded, d,
                                                     scale, scores + rq * kAttentionKeyBlock,
                                                     kAttentionKeyBlock, ahead);
        };
        with_row_count(std::min<std::int64_t>(kTileRows, rows - rq), score);
    }
}

// Rows of one query position and KV head (the heads of a GQA group share every key) handled
// together: all rows' scores of a key block, then all rows' softmax updates, then all rows'
// values. Each phase reuses one block of K or of V (64 keys x head_dim floats, 16 KiB at
// head_dim 64) from L1 for every row. Taking the rows one after another instead streamed
// 32 KiB of K and V per row through L1 (which holds 32-48 KiB), so every row re-read the block
// from L2: decode attention of a 7-head group ran at ~10 GFLOP/s on one AVX2 core.
constexpr std::int64_t kAttentionRowChunk = kAttentionScoreFloats / kAttentionKeyBlock;

// The online softmax's step for a key block of `rows` rows (row r's `count` scores at
// scores + r * kAttentionKeyBlock, its running max and sum at m[r] and l[r]): the scores become
// exp(score - new max), keep[r] = exp(old max - new max) rescales what the row summed before
// (0 on the first block, whose old max is -inf), and l[r] takes the block's sum. The rows'
// rescale factors are one vector exponential, not one libm call per row.
HWY_INLINE void update_softmax(float* scores, std::int64_t rows, std::int64_t count, float* m,
                               float* l, float* keep) {
    // Whole vectors of rows (16 lanes at most on the targets compiled).
    constexpr std::int64_t kPadded = std::max<std::int64_t>(kAttentionRowChunk, 16);
    float m_new[kAttentionRowChunk];
    float shift[kPadded];
    std::fill(shift, shift + kPadded, 0.0f);
    bool any_new_max = false;
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* s = scores + r * kAttentionKeyBlock;
        // Past the first few blocks a row's maximum rarely moves: a compare of the block's
        // lanes against it settles that without a horizontal reduction, and keep[r] is 1.
        if (m[r] != -INFINITY && !any_above(s, count, m[r])) {
            m_new[r] = m[r];
            continue;
        }
        m_new[r] = std::max(m[r], max_of_floats(s, count));
        // Past Exp's range below -104 (and -inf on the first block), e^x is 0 in f32 anyway.
        shift[r] = std::max(m[r] - m_new[r], -104.0f);
        any_new_max = true;
    }
    const DF df;
    const auto n = static_cast<std::int64_t>(hn::Lanes(df));
    float e[kPadded];
    std::fill(e, e + kPadded, 1.0f);
    for (std::int64_t r = 0; any_new_max && r < rows; r += n) {
        hn::StoreU(hn::Exp(df, hn::LoadU(df, shift + r)), df, e + r);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
        keep[r] = m[r] == -INFINITY ? 0.0f : m_new[r] == m[r] ? 1.0f : e[r];
        l[r] = l[r] * keep[r] + exp_shifted(scores + r * kAttentionKeyBlock, count, m_new[r]);
        m[r] = m_new[r];
    }
}

template <class T, bool kTiled>
void attention_tile_of(const AttentionArgs& a, const AttentionTile& tile, float* m, float* l,
                       float* acc, float* scores, const AttentionPrefetch& prefetch) {
    const std::int64_t group = a.n_heads / a.n_kv_heads;
    const std::int64_t d = a.head_dim;
    const std::int64_t n_rows = tile.n_rows(group);
    const std::int64_t q_rows = (tile.q_end - tile.q_begin) * group;  // rows per KV head
    std::fill(m, m + n_rows, -INFINITY);
    std::fill(l, l + n_rows, 0.0f);
    std::fill(acc, acc + n_rows * d, 0.0f);
    const std::int64_t kv_stride = a.n_kv_heads * d;
    float keep[kAttentionRowChunk];
    // Key blocks outermost: a block of every KV head of the tile (at most 64 keys x kv_dim
    // floats of K and of V) stays in L1/L2 while all of the tile's query rows use it.
    // K and V rows of a key range are contiguous when the tile takes every KV head (decode).
    const bool all_heads = tile.kv_head_begin == 0 && tile.kv_head_end == a.n_kv_heads;
    // A decode tile of some of the heads (short contexts, CpuTuning::
    // attention_fewer_heads_per_tile) prefetches as one of all heads does.
    const bool some_heads_decode = !all_heads && tile.q_end - tile.q_begin == 1;
    // Decode tiles (one query) read each line of the cache once, as a stream: every line
    // loaded asks for the one prefetch.stream_keys keys on (K tiles and V rows alike are
    // stream_keys x kv_stride elements further on). Left to the hardware prefetchers, a
    // thread waited on the memory for most of what it computed: Qwen2.5-0.5B's decode
    // attention at 32k positions read 52-58 GB/s on a lent 16-vCPU Xeon whose read loop gave
    // 91, and 80-81 with 64 keys ahead (bench/RESULTS.md, session 41). The last blocks ask
    // for keys past the tile, the next split's, which another thread reads soon: stopping at
    // the tile's end made Qwen2.5-0.5B 1-9% slower at 8k-32k positions. Prefill tiles reread
    // each block for every query, from L1.
    const std::int64_t ahead =
        tile.q_end - tile.q_begin == 1 ? prefetch.stream_keys * kv_stride : 0;
    const std::int64_t first_end = std::min(tile.key_begin + kAttentionKeyBlock, tile.key_end);
    if (all_heads || some_heads_decode) {
        prefetch_keys<T, kTiled>(a, tile.kv_head_begin, tile.kv_head_end, tile.key_begin,
                                 first_end);
    }
    HWY_DASSERT(!kTiled || tile.key_begin % kKeyTile == 0);
    for (std::int64_t kb = tile.key_begin; kb < tile.key_end; kb += kAttentionKeyBlock) {
        const std::int64_t ke = std::min(kb + kAttentionKeyBlock, tile.key_end);
        for (std::int64_t kvh = tile.kv_head_begin; kvh < tile.kv_head_end; ++kvh) {
            if (prefetch.next_head && (all_heads ? a.n_kv_heads > 1 : some_heads_decode)) {
                // The next head of this block, or the first head of the next block.
                if (kvh + 1 < tile.kv_head_end) {
                    prefetch_head<T, kTiled>(a, kvh + 1, kb, ke);
                } else if (ke < tile.key_end) {
                    prefetch_head<T, kTiled>(a, tile.kv_head_begin, ke,
                                             std::min(ke + kAttentionKeyBlock, tile.key_end));
                }
            }
            // Keys: tiles are read as they are (`k_tiles`: the head's first element in tile 0);
            // rows (`k0`, `k_stride` apart) are f32, f16 ones widened into scratch first.
            // Values are rows of T, read where they are.
            const T* k_src = static_cast<const T*>(a.k) + kb * kv_stride + kvh * d;
            const T* v0 = static_cast<const T*>(a.v) + kb * kv_stride + kvh * d;
            const T* k_tiles = static_cast<const T*>(a.k) + kvh * d * kKeyTile;
            const float* k0 = nullptr;
            std::int64_t k_stride = kv_stride;
            if constexpr (std::is_same_v<T, float>) {
                k0 = k_src;
            } else if constexpr (!kTiled) {
                float* k_wide = scores + kAttentionScoreFloats;
                widen_rows(k_src, kv_stride, ke - kb, d, k_wide);
                k0 = k_wide;
                k_stride = d;
            }
            for (std::int64_t qi = tile.q_begin; qi < tile.q_end; ++qi) {
                // Query qi sees keys [0, q_pos0 + qi + 1).
                const std::int64_t limit = std::min(ke, a.q_pos0 + qi + 1);
                if (limit <= kb) continue;
                const std::int64_t count = limit - kb;
                const std::int64_t row0 =
                    (kvh - tile.kv_head_begin) * q_rows + (qi - tile.q_begin) * group;
                for (std::int64_t hh0 = 0; hh0 < group; hh0 += kAttentionRowChunk) {
                    const std::int64_t rows = std::min(kAttentionRowChunk, group - hh0);
                    const float* q_first = a.q + (qi * a.n_heads + kvh * group + hh0) * d;
                    // Scores of the block, row r's at scores + r * kAttentionKeyBlock.
                    if constexpr (kTiled) {
                        score_tiled_keys(q_first, rows, k_tiles, kv_stride * kKeyTile, kb, count, d,
                                         a.scale, scores, ahead);
                    } else {
                        score_key_rows(q_first, rows, k0, k_stride, count, d, a.scale, scores);
                    }
                    update_softmax(scores, rows, count, m + row0 + hh0, l + row0 + hh0, keep);
                    // All rows in one pass where they fit the registers (each value vector
                    // converted once for all of them), else kTileRows at a time.
                    float* out = acc + (row0 + hh0) * d;
                    for (std::int64_t r = 0; r < rows; r += kTileRows) {
                        auto values = [&](auto n_rows) BRIGADE_INLINE_LAMBDA {
                            accumulate_values_rows<decltype(n_rows)::value>(
                                out + r * d, keep + r, scores + r * kAttentionKeyBlock, v0,
                                kv_stride, count, d, ahead);
                        };
                        with_row_count(std::min<std::int64_t>(kTileRows, rows - r), values);
                    }
                }
            }
        }
    }
}

void AttentionTileKernel(const AttentionArgs& a, const AttentionTile& tile, float* m, float* l,
                         float* acc, float* scores, const AttentionPrefetch& prefetch) {
    const bool tiled = a.k_layout == KeyLayout::kTiles;
    if (a.kv_dtype == DType::kF16) {
        if (tiled) {
            attention_tile_of<hwy::float16_t, true>(a, tile, m, l, acc, scores, prefetch);
        } else {
            attention_tile_of<hwy::float16_t, false>(a, tile, m, l, acc, scores, prefetch);
        }
    } else if (tiled) {
        attention_tile_of<float, true>(a, tile, m, l, acc, scores, prefetch);
    } else {
        attention_tile_of<float, false>(a, tile, m, l, acc, scores, prefetch);
    }
}

void SoftmaxExpKernel(const float* x, std::int64_t n, float* out) {
    const DF df;
    const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
    std::int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        hn::StoreU(exp_nonpositive(hn::LoadU(df, x + i)), df, out + i);
    for (; i < n; ++i) out[i] = std::exp(x[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace brigade::model::cpu {

HWY_EXPORT(AttentionTileKernel);
HWY_EXPORT(SoftmaxExpKernel);

void softmax_exp(const float* x, std::int64_t n, float* out) {
    HWY_DYNAMIC_DISPATCH(SoftmaxExpKernel)(x, n, out);
}

void attention_tile(const AttentionArgs& args, const AttentionTile& tile, float* m, float* l,
                    float* acc, float* scores, const AttentionPrefetch& prefetch) {
    HWY_DYNAMIC_DISPATCH(AttentionTileKernel)(args, tile, m, l, acc, scores, prefetch);
}

}  // namespace brigade::model::cpu
#endif  // HWY_ONCE
