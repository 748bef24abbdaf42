// The 256-bit split-int8 GEMV (matmul_split_int8_avx2.cpp), compiled once per way of taking the
// dot products: included inside a target region and a namespace of that file, after the
// namespace defines
//   dot_nibbles(lo, hi, d_lo, d_hi)   per i32 lane, the sums of its 4 bytes' lo · d_lo plus its
//                                     4 bytes' hi · d_hi (u8 codes x s8 digits, exact)
//   dot_nibbles_onto(acc, lo, ...)    acc + dot_nibbles(lo, ...) (with VNNI, the chain starts
//                                     from acc: no add)
// and makes the shared helpers (pass_factors, hsum) visible. No include guard: each variant
// includes it once.

// A = S0 · 2^7 + S1 for 32 code bytes (their low and high nibbles); `d`: the digits at the
// half-chunk's offset within its chunk (digit k even at d + 128k, odd at d + 128k + 64).
inline __m256i half_chunk_sum(__m256i lo, __m256i hi, const std::int8_t* d) {
    const __m256i a = dot_nibbles(lo, hi, d, d + 64);
    return dot_nibbles_onto(_mm256_slli_epi32(a, kPosition[1] - kPosition[0]), lo, hi, d + 128,
                            d + 192);
}

// out[t][i] = row r0 + i · x_t for R rows and T tokens (xa[t]), without the rows' additive
// bias. G32: groups of 32 (two per half-chunk: lanes 0-3 and 4-7 take their factors through a
// permute). Each row's codes are loaded and split into nibbles once for all T tokens; every
// token's floats are those it gets alone (the same operations in the same order).
template <int R, bool G32, int T>
HWY_NOINLINE void dot_tile(const Tile& m, const SplitInt8Activations* const* xa, std::int64_t r0,
                           float (*out)[4]) {
    const WeightMatrix& w = m.w;
    const std::int64_t n_groups = m.n_groups;
    const std::int64_t row_bytes = w.row_bytes();
    const std::int64_t halves = row_bytes / 32;  // full half-chunks
    const bool tail16 = row_bytes % 32 != 0;     // then 16 bytes more (rows of 32k + 16)
    const __m256i tail_mask = _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0);
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    const std::uint8_t* codes[R];
    for (int i = 0; i < R; ++i) codes[i] = base + (r0 + i) * row_bytes;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    __m256 f[T][R];  // each token's and row's sum, the bias terms included
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) f[t][i] = _mm256_setzero_ps();
    }
    alignas(32) float factor[T][R][kFactorGroups + 8];  // pass_factors's
    TilePrefetch<R> prefetch(m.xa.prefetch_bytes, row_bytes, m.xa.next_tile_prefetch_row_bytes);
    for (std::int64_t g0 = 0; g0 < n_groups; g0 += kFactorGroups) {
        const std::int64_t count = std::min(kFactorGroups, n_groups - g0);
        pass_factors<R, T>(m, xa, r0, g0, count, factor, f);
        __m256 local[T][R];
        __m256(&acc)[T][R] = kLocalSums<R, T> ? local : f;
        if constexpr (kLocalSums<R, T>) {
            for (int t = 0; t < T; ++t) {
                for (int i = 0; i < R; ++i) acc[t][i] = f[t][i];
            }
        }
        // Half-chunks [h_begin, h_end) of the pass: 64 elements each.
        const std::int64_t h_begin = (g0 << m.group_shift) / 64;
        const std::int64_t h_end =
            std::min(halves + (tail16 ? 1 : 0), (((g0 + count) << m.group_shift) + 63) / 64);
        for (std::int64_t h = h_begin; h < h_end; ++h) {
            const std::int64_t first_group = ((h * 64) >> m.group_shift) - g0;
            const std::int64_t d_at = (h / 2) * kChunkDigitBytes + (h % 2) * 32;  // this half's
            prefetch.ahead_of(codes, h * 32);
            for (int i = 0; i < R; ++i) {
                const std::uint8_t* p = codes[i] + h * 32;
                const __m256i v =
                    h < halves ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                               : _mm256_maskload_epi32(reinterpret_cast<const int*>(p), tail_mask);
                const __m256i lo = _mm256_and_si256(v, nibble);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                for (int t = 0; t < T; ++t) {
                    const float* fac = factor[t][i] + first_group;
                    const __m256 scale = G32 ? _mm256_permutevar8x32_ps(_mm256_loadu_ps(fac), pair)
                                             : _mm256_broadcast_ss(fac);
                    const __m256i sums = half_chunk_sum(lo, hi, xa[t]->digits + d_at);
                    acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[t][i]);
                }
            }
        }
        if constexpr (kLocalSums<R, T>) {
            for (int t = 0; t < T; ++t) {
                for (int i = 0; i < R; ++i) f[t][i] = acc[t][i];
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < R; ++i) out[t][i] = hsum(f[t][i]);
    }
}

// Rows [row_begin, row_end) of T tokens' products (xa[t] -> y[t]).
template <int T>
void gemv_tokens_of(const WeightMatrix& w, const SplitInt8Activations* const* xa,
                    std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                    float* const* y) {
    const Tile m{w, *xa[0], w.cols / w.group_size, group_shift(w)};
    // The lambdas only call the tiles (no vector code of their own), so the target region need
    // not reach them.
    if (w.group_size == 32) {
        for_each_row_tile_of_tokens<T>(
            row_begin, row_end, bias, y, [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
                n == 4 ? dot_tile<4, true, T>(m, xa, r, out) : dot_tile<1, true, T>(m, xa, r, out);
            });
    } else {
        for_each_row_tile_of_tokens<T>(row_begin, row_end, bias, y,
                                       [&](std::int64_t r, std::int64_t n, float(*out)[4]) {
                                           n == 4 ? dot_tile<4, false, T>(m, xa, r, out)
                                                  : dot_tile<1, false, T>(m, xa, r, out);
                                       });
    }
}

// 1-4 (`count`) tokens.
inline void gemv_tokens(const WeightMatrix& w, const SplitInt8Activations* const* xa, int count,
                        std::int64_t row_begin, std::int64_t row_end, const WeightVector* bias,
                        float* const* y) {
    with_token_count(count, [&](auto t) {
        gemv_tokens_of<decltype(t)::value>(w, xa, row_begin, row_end, bias, y);
    });
}
