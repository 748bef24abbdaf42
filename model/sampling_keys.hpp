#pragma once
// Candidate keys of Sampler (sampling.cpp, sampling_deep.cpp): a (logit, id) pair as one integer
// whose ascending order is the reference's candidate order, descending logit then ascending id.

#include <bit>
#include <cstdint>

namespace brigade::model {

// The float's bits mapped to an order-preserving unsigned, inverted, in the high half; the id
// in the low half. Sorting these plain integers is several times faster than sorting ids
// through a comparator that loads both logits.
inline std::uint64_t candidate_key(float logit, std::int32_t id) {
    const auto bits = std::bit_cast<std::uint32_t>(logit + 0.0f);  // -0 sorts as +0
    // Negative floats: all bits flipped; others: the sign bit set (no branch, so the loop over
    // the vocabulary vectorizes).
    const std::uint32_t negative =
        static_cast<std::uint32_t>(static_cast<std::int32_t>(bits) >> 31);
    const std::uint32_t ascending = bits ^ (negative | 0x80000000u);
    return (static_cast<std::uint64_t>(~ascending) << 32) | static_cast<std::uint32_t>(id);
}

inline std::int32_t candidate_id(std::uint64_t key) {
    return static_cast<std::int32_t>(key & 0xFFFFFFFFu);
}

}  // namespace brigade::model
