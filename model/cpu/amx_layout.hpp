#pragma once
// How the AMX-INT8 decode kernel (matmul_amx.cpp) lays a batch's activation digits out in B
// tiles: shared by the preparation of the digits (matmul_amx_prepare.cpp) and the multiply,
// which must read what the other wrote. The kernel's own header comment says why it is built
// this way.

#include <algorithm>
#include <cstdint>

#include "model/cpu/kernels.hpp"
#include "model/cpu/matmul_split_int8.hpp"

namespace brigade::model::cpu::amx_layout {

constexpr std::int64_t kTileTokens = 16;
constexpr std::int64_t kTileRows = 16;
// Batches up to this many tokens take narrow blocks (Layout).
constexpr std::int64_t kNarrowMaxTokens = 8;

// The plan of D digits: four (split_int8::kAmxDigits) or two (kGemvDigits).
template <int D>
constexpr const split_int8::DigitPlan& plan_of() {
    static_assert(D == 2 || D == 4);
    if constexpr (D == 4) {
        return split_int8::kAmxDigits;
    } else {
        return split_int8::kGemvDigits;
    }
}
inline const split_int8::DigitPlan& plan_of(int digits) {
    return digits == 2 ? plan_of<2>() : plan_of<4>();
}

inline std::int64_t steps_of(const WeightMatrix& w) { return w.group_size == 128 ? 2 : 1; }
// K bytes of a tile: the group, 64 at most.
inline std::int64_t k_bytes(const WeightMatrix& w) {
    return std::min<std::int64_t>(w.group_size, 64);
}

// How a batch's tokens are laid out in B tiles. Wide blocks hold 16 tokens, one B tile per digit
// (D multiplies and D C tiles per group). Narrow blocks hold 16 / D tokens with their D digits
// side by side in one B tile (column D·t + k: digit k of token t): one multiply per group, and
// the fold combines the digits in f32 lanes weighted by their place (digit_weight: 2^17, 2^11,
// 2^5, 1 or 2^7, 1), summed per token at the end of a row. A small batch then pays a quarter (a
// half) of the multiplies and folds a 16-token block would cost it.
//
// Paired narrow blocks (AmxBuffers::pair_groups; two digits, up to 4 tokens, which fill 8 of the
// 16 columns): group g's digits go to the even columns (2·(D·t + k)) and group g + 1's to the
// odd ones, each group's B tile zero in the other's columns. Both multiplies accumulate into one
// C tile, and one fold of its 16 rows serves the two groups, the scales taken as pairs (a 64-bit
// broadcast of scale[g], scale[g + 1] matches the lanes). A token's four lanes are summed at
// the end of a row. Only for one K step per group (32 or 64) and an even count of groups. For
// 4-bit codes the pair's two tiles are split by nibble instead of by group: the first holds the
// low nibbles of the pair's code bytes (the even elements of both groups, group g's in the first
// half of K and g + 1's in the second), the second the high ones, each group's digits in its
// half of K and its columns; so one load per row gives both A tiles (unpack_nibble_pair;
// AmxBuffers::pair_nibbles).
struct Layout {
    bool narrow;
    std::int64_t block_tokens;  // 16 / digits or 16
    int digits;
    bool paired = false;
    bool nibbles = false;  // a 4-bit pair's tiles split by nibble
};
inline Layout layout_of(std::int64_t n, int digits) {
    return n <= kNarrowMaxTokens ? Layout{true, kTileTokens / digits, digits}
                                 : Layout{false, kTileTokens, digits};
}
inline Layout layout_of(const WeightMatrix& w, std::int64_t n, int digits, bool pair_groups,
                        bool pair_nibbles) {
    Layout layout = layout_of(n, digits);
    layout.paired = amx_pairs_groups(w, n, digits, pair_groups);
    layout.nibbles = layout.paired && pair_nibbles && w.bits == 4;
    return layout;
}
// A narrow block's column for digit k of its token t, from group g.
inline std::int64_t narrow_column(const Layout& layout, std::int64_t t, int k, std::int64_t g) {
    const std::int64_t column = layout.digits * t + k;
    return layout.paired ? 2 * column + (g & 1) : column;
}
// Lanes of a narrow block's row that belong to one token.
inline std::int64_t narrow_token_lanes(const Layout& layout) {
    return layout.paired ? 2 * layout.digits : layout.digits;
}
// Digit k's weight in units (unit = step · 2^-position[last]): 2^(position[last] - position[k]).
inline float digit_weight(const split_int8::DigitPlan& plan, int k) {
    return static_cast<float>(1u << (plan.position[plan.count - 1] - plan.position[k]));
}
// Bytes of one group's B tiles for a token block: wide, D digits x group x 16 tokens; narrow,
// group x 16 / D tokens x D digits.
inline std::int64_t group_tile_bytes(const WeightMatrix& w, Layout layout) {
    return (layout.narrow ? 1 : layout.digits) * w.group_size * 16;
}

}  // namespace brigade::model::cpu::amx_layout
