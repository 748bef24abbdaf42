// The x86 row kernel of the int8-activation GEMV, written once for 256-bit vectors and
// compiled once per instruction set by matmul_int8_x86.cpp. It is included inside the
// variant's namespace and target region (no #include here), after that namespace defines:
//   Q8 / prepare_q8(codes)       what an 8-bit code vector becomes before its products
//   dot_q8(acc, Q8, xq)          acc += the 4-product sums of codes x xq (i32 lanes)
//   dot_q4(acc, lo, hi, xlo, xhi)  the same for split nibbles (codes <= 15)
//   kQ8Centered                  dot_q8 sums (q - 128) * xq; the kernel adds 128 * Σxq
//
// Lane bookkeeping: an i32 lane of dot_* sums the products of 4 adjacent code bytes, so a
// lane belongs to the weight group of those bytes. Groups of 32 or more bytes fill whole
// 32-byte chunks: one broadcast scale per group. 4-bit groups of 32 elements are 16 bytes:
// a chunk holds two of them, lanes 0-3 and 4-7, and takes a two-valued scale vector.

// Element `index` of an F32/F16/BF16 array as f32, inline: read once per group and row, so a
// function call or a widening pass per row would cost more than the codes of a narrow row.
inline float affine_at(DType dtype, const void* base, std::int64_t index) {
    const auto* p = static_cast<const std::uint8_t*>(base);
    if (dtype == DType::kF32) {
        float f;
        std::memcpy(&f, p + index * 4, 4);
        return f;
    }
    std::uint16_t h;
    std::memcpy(&h, p + index * 2, 2);
    return dtype == DType::kBF16 ? bf16_to_f32(h) : _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// out[t] = row r · x[t0 + t] for T tokens, without the row's additive bias.
template <int BITS, int T>
inline void dot_row(const Int8Rows& m, std::int64_t r, std::int64_t t0, float* out) {
    const WeightMatrix& w = m.w;
    const std::int64_t cols = w.cols, group = w.group_size, n_groups = cols / group;
    const std::int64_t group_bytes = group * BITS / 8;
    const std::int64_t prefetch = m.xa.prefetch_bytes;
    const auto* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes();
    const std::int8_t* xq[T];
    const float* step[T];
    const float* sum[T];
    const std::int32_t* qsum[T];
    __m256 f[T];
    float b[T];
    for (int t = 0; t < T; ++t) {
        xq[t] = m.xa.xq + (t0 + t) * cols;
        step[t] = m.xa.step + (t0 + t) * n_groups;
        sum[t] = m.xa.sum + (t0 + t) * n_groups;
        qsum[t] = m.xa.qsum + (t0 + t) * n_groups;
        f[t] = _mm256_setzero_ps();
        b[t] = 0.0f;
    }
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const DType sd = w.scale_dtype;
    const std::int64_t g_row = r * n_groups;  // this row's first scale/bias index
    if (BITS == 8 || group_bytes >= kInt8ChunkBytes) {
        for (std::int64_t g = 0; g < n_groups; ++g) {
            const std::int64_t first = g * group_bytes;
            __m256i acc[T];
            for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256();
            for (std::int64_t byte = first; byte < first + group_bytes; byte += 32) {
                if (prefetch > 0) {
                    _mm_prefetch(reinterpret_cast<const char*>(row + byte + prefetch), _MM_HINT_T0);
                }
                const __m256i v = load256(row + byte);
                if constexpr (BITS == 4) {
                    const __m256i lo = _mm256_and_si256(v, nibble);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                    for (int t = 0; t < T; ++t) {
                        acc[t] = dot_q4(acc[t], lo, hi, load256(xq[t] + 2 * byte),
                                        load256(xq[t] + 2 * byte + 32));
                    }
                } else {
                    const Q8 q = prepare_q8(v);
                    for (int t = 0; t < T; ++t) acc[t] = dot_q8(acc[t], q, load256(xq[t] + byte));
                }
            }
            const float scale = affine_at(sd, w.scales, g_row + g);
            const float bias = affine_at(sd, w.biases, g_row + g);
            for (int t = 0; t < T; ++t) {
                __m256i total = acc[t];
                if constexpr (BITS == 8 && kQ8Centered) {
                    total = _mm256_add_epi32(
                        total, _mm256_setr_epi32(128 * qsum[t][g], 0, 0, 0, 0, 0, 0, 0));
                }
                f[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total),
                                       _mm256_set1_ps(scale * step[t][g]), f[t]);
                b[t] += bias * sum[t][g];
            }
        }
    } else {
        // 4-bit, 16-byte groups: groups g and g + 1 share a chunk; a row with an odd number of
        // groups ends in a 16-byte chunk (upper lanes zero, odd elements 16 slots in instead
        // of 32, matmul_int8.hpp).
        for (std::int64_t g = 0; g < n_groups; g += 2) {
            const std::int64_t byte = g * 16;
            const bool pair = g + 1 < n_groups;
            if (prefetch > 0) {
                _mm_prefetch(reinterpret_cast<const char*>(row + byte + prefetch), _MM_HINT_T0);
            }
            const __m256i v = pair ? load256(row + byte)
                                   : _mm256_zextsi128_si256(_mm_loadu_si128(
                                         reinterpret_cast<const __m128i*>(row + byte)));
            const std::int64_t odd = pair ? 32 : 16;
            const __m256i lo = _mm256_and_si256(v, nibble);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
            const float scale_a = affine_at(sd, w.scales, g_row + g);
            const float bias_a = affine_at(sd, w.biases, g_row + g);
            const float scale_b = pair ? affine_at(sd, w.scales, g_row + g + 1) : 0.0f;
            const float bias_b = pair ? affine_at(sd, w.biases, g_row + g + 1) : 0.0f;
            for (int t = 0; t < T; ++t) {
                const __m256i total =
                    dot_q4(_mm256_setzero_si256(), lo, hi, load256(xq[t] + 2 * byte),
                           load256(xq[t] + 2 * byte + odd));
                const float step_b = pair ? step[t][g + 1] : 0.0f;
                const __m256 d = _mm256_set_m128(_mm_set1_ps(scale_b * step_b),
                                                 _mm_set1_ps(scale_a * step[t][g]));
                f[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), d, f[t]);
                b[t] += bias_a * sum[t][g] + (pair ? bias_b * sum[t][g + 1] : 0.0f);
            }
        }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum(f[t]) + b[t];
}

template <int BITS>
inline void gemv_rows_bits(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                           std::int64_t row_end, const WeightVector* bias, float* y,
                           std::int64_t ldy) {
    const bool has_bias = bias != nullptr && bias->valid();
    float out[4];
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float b = has_bias ? load_scalar(bias->dtype, bias->data, r) : 0.0f;
        std::int64_t t = 0;
        for (; t + 4 <= n; t += 4) {
            dot_row<BITS, 4>(m, r, t, out);
            for (int i = 0; i < 4; ++i) y[(t + i) * ldy + r] = out[i] + b;
        }
        const std::int64_t left = n - t;
        if (left == 3) dot_row<BITS, 3>(m, r, t, out);
        if (left == 2) dot_row<BITS, 2>(m, r, t, out);
        if (left == 1) dot_row<BITS, 1>(m, r, t, out);
        for (std::int64_t i = 0; i < left; ++i) y[(t + i) * ldy + r] = out[i] + b;
    }
}

inline void gemv_rows(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                      std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy) {
    if (m.w.bits == 4) {
        gemv_rows_bits<4>(m, n, row_begin, row_end, bias, y, ldy);
    } else {
        gemv_rows_bits<8>(m, n, row_begin, row_end, bias, y, ldy);
    }
}
