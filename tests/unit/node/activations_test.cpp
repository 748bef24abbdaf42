// Hidden states on the wire: F32 is exact; BF16 rounds to nearest even (as torch does) and
// keeps NaN and infinities; a payload of the wrong size is an error, not a crash.

#include "node/activations.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace brigade::node {
namespace {

float bits_to_float(std::uint32_t b) {
    float f = 0;
    std::memcpy(&f, &b, 4);
    return f;
}

TEST(Activations, F32RoundTripIsExact) {
    const std::vector<float> v = {0.0f, -0.0f, 1.0f / 3.0f, -1e-38f, 3.4e38f, 123.456f};
    std::vector<std::uint8_t> bytes;
    encode_activations(v, mesh::ActivationDType::kF32, bytes);
    EXPECT_EQ(bytes.size(), v.size() * 4);
    std::vector<float> back;
    ASSERT_TRUE(decode_activations(bytes, mesh::ActivationDType::kF32, v.size(), back));
    EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * 4), 0);
}

TEST(Activations, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 lies exactly between two BF16 values (1 and 1 + 2^-7): ties go to the even one (1).
    // 1 + 3 * 2^-8 lies between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
    // 1 + 2^-8 + 2^-20 is past the tie: rounds up to 1 + 2^-7.
    const std::vector<float> v = {1.0f + 0x1p-8f,
                                  1.0f + 3 * 0x1p-8f,
                                  1.0f + 0x1p-8f + 0x1p-20f,
                                  -2.5f,
                                  std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(),
                                  bits_to_float(0x7f7fffffu)};  // FLT_MAX rounds to +inf
    std::vector<std::uint8_t> bytes;
    encode_activations(v, mesh::ActivationDType::kBF16, bytes);
    ASSERT_EQ(bytes.size(), v.size() * 2);
    std::vector<float> back;
    ASSERT_TRUE(decode_activations(bytes, mesh::ActivationDType::kBF16, v.size(), back));
    EXPECT_EQ(back[0], 1.0f);
    EXPECT_EQ(back[1], 1.0f + 0x1p-6f);
    EXPECT_EQ(back[2], 1.0f + 0x1p-7f);
    EXPECT_EQ(back[3], -2.5f);
    EXPECT_TRUE(std::isinf(back[4]) && back[4] > 0);
    EXPECT_TRUE(std::isnan(back[5]));
    EXPECT_TRUE(std::isinf(back[6]));
    // Little-endian on the wire: -2.5f is 0xC020 in BF16.
    EXPECT_EQ(bytes[6], 0x20);
    EXPECT_EQ(bytes[7], 0xC0);
}

TEST(Activations, Bf16RelativeErrorIsAtMostHalfAUnitInTheLastPlace) {
    std::vector<float> v;
    for (int i = 1; i < 2000; ++i) v.push_back(std::sin(static_cast<float>(i)) * i);
    std::vector<std::uint8_t> bytes;
    encode_activations(v, mesh::ActivationDType::kBF16, bytes);
    std::vector<float> back;
    ASSERT_TRUE(decode_activations(bytes, mesh::ActivationDType::kBF16, v.size(), back));
    for (std::size_t i = 0; i < v.size(); ++i) {
        EXPECT_LE(std::abs(back[i] - v[i]), std::abs(v[i]) * 0x1p-8f) << v[i];
    }
}

TEST(Activations, WrongSizeIsAnError) {
    std::vector<std::uint8_t> bytes(10);
    std::vector<float> out;
    auto r = decode_activations(bytes, mesh::ActivationDType::kBF16, 4, out);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("expected 8"), std::string::npos) << r.error().message;
    EXPECT_FALSE(decode_activations(bytes, mesh::ActivationDType::kF32, 3, out));
    EXPECT_TRUE(decode_activations(bytes, mesh::ActivationDType::kBF16, 5, out));
}

}  // namespace
}  // namespace brigade::node
