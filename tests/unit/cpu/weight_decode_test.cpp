// The scalar weight decoders: half-precision conversions and MLX affine bit unpacking, checked
// against hand-packed words (formats.md §2.4) and an independent bit-by-bit reader.

#include "model/cpu/weight_decode.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/unit/cpu/weight_fixtures.hpp"

namespace brigade::model::cpu {
namespace {

using test::naive_code;

// Little-endian bytes of u32 words, as they sit in a safetensors U32 tensor.
std::vector<std::uint8_t> words_to_bytes(const std::vector<std::uint32_t>& words) {
    std::vector<std::uint8_t> bytes;
    for (std::uint32_t w : words) {
        for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<std::uint8_t>(w >> (8 * i)));
    }
    return bytes;
}

TEST(HalfPrecision, F16KnownValues) {
    EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
    EXPECT_EQ(f16_to_f32(0x8000), -0.0f);
    EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
    EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
    EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

TEST(HalfPrecision, F16RoundTripsEveryNonNanValue) {
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
        const auto hh = static_cast<std::uint16_t>(h);
        const float f = f16_to_f32(hh);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
            continue;
        }
        ASSERT_EQ(f32_to_f16(f), hh) << "h=" << h;
    }
}

TEST(HalfPrecision, F16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
    EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // rounds past max -> inf
    EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and min subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -40)), 0x0000);
    EXPECT_EQ(f32_to_f16(-std::ldexp(3.0f, -24)), 0x8003);
}

TEST(HalfPrecision, Bf16) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
    EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)), 0x3F81);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Unpack, ThreeBitElementTenStraddlesWordZeroAndOne) {
    // Element 10: its low 2 bits are word0 bits 30-31, its high bit is word1 bit 0.
    const auto bytes = words_to_bytes({0x40000000u, 0x00000001u, 0x00000000u});
    EXPECT_EQ(unpack_code(bytes.data(), 3, 10), 0b101u);
    for (int k = 0; k < 32; ++k) {
        if (k != 10) {
            EXPECT_EQ(unpack_code(bytes.data(), 3, k), 0u) << "k=" << k;
        }
    }
    // Only the high bit: word1 bit 0.
    const auto high = words_to_bytes({0u, 1u, 0u});
    EXPECT_EQ(unpack_code(high.data(), 3, 10), 0b100u);
    // Element 21: low bit = word1 bit 31, high 2 bits = word2 bits 0-1.
    const auto e21 = words_to_bytes({0u, 0x80000000u, 0x00000002u});
    EXPECT_EQ(unpack_code(e21.data(), 3, 21), 0b101u);
    // Element 31 is the last 3 bits of word 2.
    const auto e31 = words_to_bytes({0u, 0u, 0xE0000000u});
    EXPECT_EQ(unpack_code(e31.data(), 3, 31), 7u);
    EXPECT_EQ(unpack_code(e31.data(), 3, 30), 0u);
}

TEST(Unpack, ThreeBitByteFormulaFromFormatsDoc) {
    // v0=w0&7, v1=(w0>>3)&7, v2=(w0>>6)|((w1&1)<<2), ... for bytes w0..w2.
    const std::vector<std::uint8_t> b = {0xB5, 0x6C, 0xE3};
    const std::uint32_t expect[8] = {b[0] & 7u,
                                     (b[0] >> 3) & 7u,
                                     (b[0] >> 6) | ((b[1] & 1u) << 2),
                                     (b[1] >> 1) & 7u,
                                     (b[1] >> 4) & 7u,
                                     (b[1] >> 7) | ((b[2] & 3u) << 1),
                                     (b[2] >> 2) & 7u,
                                     static_cast<std::uint32_t>(b[2] >> 5)};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(unpack_code(b.data(), 3, k), expect[k]) << k;
}

TEST(Unpack, FiveAndSixBitStraddles) {
    // 5-bit element 6 = word0 bits 30-31 (low) + word1 bits 0-2 (high).
    const auto five = words_to_bytes({0x80000000u, 0x00000005u, 0u, 0u, 0u});
    EXPECT_EQ(unpack_code(five.data(), 5, 6), 0b10110u);
    EXPECT_EQ(unpack_code(five.data(), 5, 5), 0u);
    EXPECT_EQ(unpack_code(five.data(), 5, 7), 0u);
    // 6-bit element 5 = word0 bits 30-31 (low) + word1 bits 0-3 (high).
    const auto six = words_to_bytes({0xC0000000u, 0x00000009u, 0u});
    EXPECT_EQ(unpack_code(six.data(), 6, 5), 0b100111u);
    EXPECT_EQ(unpack_code(six.data(), 6, 4), 0u);
    EXPECT_EQ(unpack_code(six.data(), 6, 6), 0u);
}

TEST(Unpack, PowerOfTwoWidths) {
    const auto four = words_to_bytes({0x87654321u});
    for (int k = 0; k < 8; ++k) EXPECT_EQ(unpack_code(four.data(), 4, k), k + 1u);
    const auto two = words_to_bytes({0xE4E4E4E4u});  // 0b11100100: 0,1,2,3 per byte
    for (int k = 0; k < 16; ++k) EXPECT_EQ(unpack_code(two.data(), 2, k), k % 4u);
    const auto eight = words_to_bytes({0x04030201u});
    for (int k = 0; k < 4; ++k) EXPECT_EQ(unpack_code(eight.data(), 8, k), k + 1u);
}

TEST(Unpack, MatchesBitByBitReaderOnRandomStreams) {
    std::mt19937 rng(7);
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        std::vector<std::uint8_t> bytes(4 * bits * 4);  // 128 elements
        for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
        for (std::int64_t k = 0; k < 128; ++k) {
            ASSERT_EQ(unpack_code(bytes.data(), bits, k), naive_code(bytes, bits, k))
                << "bits=" << bits << " k=" << k;
        }
    }
}

TEST(DequantizeRow, EveryFormatMatchesIndependentPackerUnaligned) {
    for (DType sd : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (int bits : {2, 3, 4, 5, 6, 8}) {
            for (int group : {32, 64, 128}) {
                for (int misalign : {0, 1, 3}) {
                    const std::int64_t cols = group * 3;
                    auto w = test::make_quant_weight(bits, group, sd, 5, cols,
                                                     bits * 100 + group + misalign, misalign);
                    std::vector<float> row(static_cast<std::size_t>(cols));
                    for (std::int64_t r = 0; r < 5; ++r) {
                        dequantize_row(w.view, r, row.data());
                        for (std::int64_t c = 0; c < cols; ++c) {
                            ASSERT_EQ(row[c], w.dense[r * cols + c])
                                << "bits=" << bits << " group=" << group << " r=" << r
                                << " c=" << c;
                        }
                    }
                }
            }
        }
    }
}

TEST(DequantizeRow, PlainFormatsUnaligned) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
        auto w = test::make_plain_weight(dt, 3, 37, 11, 1);
        std::vector<float> row(37);
        for (std::int64_t r = 0; r < 3; ++r) {
            dequantize_row(w.view, r, row.data());
            for (int c = 0; c < 37; ++c) ASSERT_EQ(row[c], w.dense[r * 37 + c]);
        }
    }
}

TEST(WeightFormat, RejectsWhatCannotBeComputed) {
    auto w = test::make_quant_weight(4, 64, DType::kBF16, 2, 128, 1);
    EXPECT_TRUE(weight_format_supported(w.view));
    WeightMatrix bad = w.view;
    bad.bits = 7;
    EXPECT_FALSE(check_weight_format(bad).has_value());
    bad = w.view;
    bad.group_size = 16;
    EXPECT_FALSE(weight_format_supported(bad));
    bad = w.view;
    bad.cols = 96;  // not a multiple of 64
    EXPECT_EQ(check_weight_format(bad).error().code, errc::shape_mismatch);
    bad = w.view;
    bad.biases = nullptr;
    EXPECT_EQ(check_weight_format(bad).error().code, errc::missing_tensor);
    bad = w.view;
    bad.scale_dtype = DType::kU8;
    EXPECT_FALSE(weight_format_supported(bad));
    WeightMatrix plain{DType::kI8, 2, 2, w.data.data()};
    EXPECT_EQ(check_weight_format(plain).error().code, errc::unsupported_dtype);
    EXPECT_FALSE(weight_format_supported(WeightMatrix{}));
}

}  // namespace
}  // namespace brigade::model::cpu
