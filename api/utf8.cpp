#include "api/utf8.hpp"

#include <cstdint>

namespace brigade::api {

namespace {

// Length of the valid sequence starting at s[i], 0 if invalid, or -needed if valid so far but
// truncated by the end of `s`.
int sequence_length(std::string_view s, std::size_t i) noexcept {
    const auto b0 = static_cast<std::uint8_t>(s[i]);
    if (b0 < 0x80) return 1;
    int len = 0;
    std::uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (RFC 3629 table)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;  // no overlongs
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;  // no overlongs
        if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return 0;
    }
    for (int k = 1; k < len; ++k) {
        if (i + k >= s.size()) return -len;
        const auto b = static_cast<std::uint8_t>(s[i + k]);
        const std::uint8_t min = k == 1 ? lo : 0x80;
        const std::uint8_t max = k == 1 ? hi : 0xBF;
        if (b < min || b > max) return 0;
    }
    return len;
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view s) noexcept {
    std::size_t i = 0;
    while (i < s.size()) {
        const int len = sequence_length(s, i);
        if (len <= 0) return i;
        i += static_cast<std::size_t>(len);
    }
    return s.size();
}

std::size_t complete_utf8_prefix(std::string_view s) noexcept {
    std::size_t i = 0;
    while (i < s.size()) {
        const int len = sequence_length(s, i);
        if (len < 0) return i;                              // truncated at the end: hold it back
        i += len == 0 ? 1 : static_cast<std::size_t>(len);  // invalid bytes never complete: pass
    }
    return s.size();
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
        const int len = sequence_length(s, i);
        if (len > 0) {
            out.append(s.substr(i, static_cast<std::size_t>(len)));
            i += static_cast<std::size_t>(len);
        } else {
            out.append("\xEF\xBF\xBD");
            ++i;
        }
    }
    return out;
}

}  // namespace brigade::api
