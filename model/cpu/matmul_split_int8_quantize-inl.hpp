// The split-int8 quantizer's loop over weight groups, where the digits' layout is written
// (matmul_split_int8.cpp documents it). Compiled once per instruction set: included inside the
// target region and a namespace of its own in matmul_split_int8.cpp (AVX-512) and
// matmul_split_int8_avx2.cpp (AVX2), after that namespace defines
//   group_max_sum(xg, group, m, s)       max|x| and the f32 sum of a group's elements
//   store_block(plan, xb, inv, step, even, odd)  the digits of the 32 elements at xb: the even
//                                          elements' digit k at even + 128k, the odd ones' at
//                                          odd + 128k (`step`: one d0, `inv`: its inverse)
// No include guard: each variant includes it once.

// Splits groups [begin, end) of x[n, w.cols] (see kernels.hpp's split_activations_int8).
inline void split_groups(const DigitPlan& plan, const WeightMatrix& w, const float* x,
                         std::int64_t begin, std::int64_t end, std::int8_t* digits, float* unit,
                         float* sum) {
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = w.cols / group;
    const std::int64_t token_bytes = split_int8::token_bytes(w, plan);
    for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t t = i / n_groups, g = i % n_groups;
        const float* xg = x + i * group;  // x is [n, cols]: group i starts at i * group
        float m = 0.0f, s = 0.0f;
        group_max_sum(xg, group, m, s);
        const float step = m / 127.0f;  // value of one d0
        unit[i] = step * plan.unit_in_steps();
        sum[i] = s;
        const float inv = m > 0.0f ? 127.0f / m : 0.0f;
        std::int8_t* token = digits + t * token_bytes;
        for (std::int64_t e = 0; e < group; e += 32) {
            // 32 elements are 16 bytes of codes: the even ones meet the low nibbles, the odd
            // ones the high nibbles, 64 bytes further on in each digit's 128.
            const std::int64_t element = g * group + e;  // in the row
            std::int8_t* even =
                token + element / kChunkElems * plan.chunk_bytes() + element % kChunkElems / 2;
            store_block(plan, xg + e, inv, step, even, even + 64);
        }
        if (g == n_groups - 1) zero_padding(w, plan, token);
    }
}

// Splits 8-bit rows' groups [begin, end) of x[n, w.cols] into the GEMV's digits: chunks of 64
// elements, each digit's 64 bytes in element order (token_bytes8). StoreBlock8(xb, inv, step,
// dst) stores the digits of the 16 elements at xb in element order, digit k at dst + 64k (a
// template argument: the Arm file, whose kernel takes no 8-bit rows, defines none).
template <void (*StoreBlock8)(const float*, float, float, std::int8_t*)>
void split8_groups(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                   std::int8_t* digits, float* unit, float* sum) {
    const std::int64_t group = w.group_size;
    const std::int64_t n_groups = w.cols / group;
    const std::int64_t token_bytes = token_bytes8(w);
    for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t t = i / n_groups, g = i % n_groups;
        const float* xg = x + i * group;
        float m = 0.0f, s = 0.0f;
        group_max_sum(xg, group, m, s);
        const float step = m / 127.0f;
        unit[i] = step * kUnitInSteps;
        sum[i] = s;
        const float inv = m > 0.0f ? 127.0f / m : 0.0f;
        std::int8_t* token = digits + t * token_bytes;
        for (std::int64_t e = 0; e < group; e += 16) {
            const std::int64_t element = g * group + e;  // in the row, in element order
            StoreBlock8(
                xg + e, inv, step,
                token + element / kChunk8Elems * kChunk8DigitBytes + element % kChunk8Elems);
        }
        // A half last chunk (rows of 32 x odd columns): its missing codes load as zero, and
        // zero digits keep the sums exact whatever they would meet.
        if (g == n_groups - 1 && w.cols % kChunk8Elems != 0) {
            std::int8_t* last = token + (w.cols / kChunk8Elems) * kChunk8DigitBytes;
            const std::int64_t used = w.cols % kChunk8Elems;
            for (int k = 0; k < kDigits; ++k) {
                std::memset(last + k * kChunk8Elems + used, 0,
                            static_cast<std::size_t>(kChunk8Elems - used));
            }
        }
    }
}
