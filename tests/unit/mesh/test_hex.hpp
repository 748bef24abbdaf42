#pragma once
// Hex helpers shared by the mesh unit tests.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::mesh::test {

inline std::vector<std::uint8_t> from_hex(std::string_view hex) {
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return c - 'A' + 10;
    };
    std::vector<std::uint8_t> out(hex.size() / 2);
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<std::uint8_t>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
    }
    return out;
}

template <class Bytes>
std::string hex(const Bytes& b) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (std::uint8_t v : b) {
        s.push_back(kDigits[v >> 4]);
        s.push_back(kDigits[v & 15]);
    }
    return s;
}

inline std::vector<std::uint8_t> bytes_of(std::string_view s) {
    return std::vector<std::uint8_t>(s.begin(), s.end());
}

}  // namespace brigade::mesh::test
