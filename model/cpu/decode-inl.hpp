// Per-target helpers shared by the Highway kernel files (matmul*.cpp, attention.cpp): the
// register count, picking a tile instantiation at run time, reading scales of any float
// dtype and unpacking 32-element blocks of MLX affine codes.
// Included after <hwy/highway.h> inside a foreach_target translation unit.

// Normal include guard for non-SIMD parts; the toggle re-includes per target.
#if defined(BRIGADE_MODEL_CPU_DECODE_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef BRIGADE_MODEL_CPU_DECODE_INL_HPP_
#undef BRIGADE_MODEL_CPU_DECODE_INL_HPP_
#else
#define BRIGADE_MODEL_CPU_DECODE_INL_HPP_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "model/cpu/weight_decode.hpp"

HWY_BEFORE_NAMESPACE();
namespace brigade::model::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vector registers of the target: 32 on AVX-512 and AArch64, 16 elsewhere. Register tiles of
// the kernels are sized from it.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM_A64
constexpr int kVectorRegisters = 32;
#else
constexpr int kVectorRegisters = 16;
#endif

// Calls f(std::integral_constant<int, K>{}) for the K among `Ks` that equals k (nothing if
// none): a kernel picks its register-tile instantiation for a count known only at run time.
// With the lambda marked BRIGADE_INLINE_LAMBDA (kernels.hpp), each case inlines as if written
// out; both must be compiled for the same target, hence this per-target header.
template <int... Ks, class F>
HWY_INLINE void with_constant(std::int64_t k, std::integer_sequence<int, Ks...>, F&& f) {
    ((k == Ks ? f(std::integral_constant<int, Ks>{}) : void()), ...);
}

HWY_INLINE float load_any(DType dtype, const void* base, std::int64_t index) {
    const auto* p = static_cast<const std::uint8_t*>(base);
    if (dtype == DType::kF32) {
        float f;
        std::memcpy(&f, p + index * 4, 4);
        return f;
    }
    std::uint16_t h;
    std::memcpy(&h, p + index * 2, 2);
    return dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Bits widths that are not powers of two: 8 elements occupy exactly BITS bytes, read as one
// little-endian integer and split with shifts.
template <int BITS>
HWY_INLINE void unpack_block_swar(const std::uint8_t* block, std::uint8_t* codes) {
    constexpr std::uint64_t kMask = (1u << BITS) - 1u;
    for (int u = 0; u < 4; ++u) {
        std::uint64_t v = 0;
        std::memcpy(&v, block + u * BITS, BITS);
        for (int j = 0; j < 8; ++j) {
            codes[u * 8 + j] = static_cast<std::uint8_t>((v >> (j * BITS)) & kMask);
        }
    }
}

// The 32 codes of the block at `block` (4*bits bytes) in element order: either `block` itself
// (8-bit) or `staged`, filled here.
HWY_INLINE const std::uint8_t* stage_block(const std::uint8_t* block, int bits,
                                           std::uint8_t* HWY_RESTRICT staged) {
    switch (bits) {
        case 8:
            return block;
        case 4: {
#if HWY_TARGET != HWY_SCALAR
            const hn::CappedTag<std::uint8_t, 16> d8;
            if (hn::Lanes(d8) == 16) {
                const auto v = hn::LoadU(d8, block);
                const auto lo = hn::And(v, hn::Set(d8, 0x0F));
                const auto hi = hn::ShiftRight<4>(v);
                // Byte i holds elements 2i (low nibble) and 2i+1 (high nibble).
                hn::StoreU(hn::InterleaveLower(d8, lo, hi), d8, staged);
                hn::StoreU(hn::InterleaveUpper(d8, lo, hi), d8, staged + 16);
                return staged;
            }
#endif
            for (int i = 0; i < 16; ++i) {
                staged[2 * i] = block[i] & 0x0F;
                staged[2 * i + 1] = block[i] >> 4;
            }
            return staged;
        }
        case 2:
            unpack_block_swar<2>(block, staged);
            return staged;
        case 3:
            unpack_block_swar<3>(block, staged);
            return staged;
        case 5:
            unpack_block_swar<5>(block, staged);
            return staged;
        case 6:
            unpack_block_swar<6>(block, staged);
            return staged;
        default:
            return staged;
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace brigade::model::cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
