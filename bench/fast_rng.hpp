#pragma once
// xorshift64*: random weights for gigabytes of benchmark matrices and checkpoints in seconds
// (engine_bench's checkpoints, kernels_bench's matrices).

#include <cstdint>

namespace brigade::bench {

struct FastRng {
    std::uint64_t s = 0x9E3779B97F4A7C15ull;
    std::uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    float uniform(float lo, float hi) {
        return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
    }
};

}  // namespace brigade::bench
