#include "model/text/utf8.hpp"

#include <cstdint>

namespace brigade::model::text {
namespace {

// Length of a sequence from its lead byte; 0 for a byte that cannot start one.
int sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

// Whether the continuation byte at index 1 is allowed after `lead` (rules out overlongs,
// surrogates and > U+10FFFF, per the Unicode table of well-formed sequences).
bool second_byte_ok(unsigned char lead, unsigned char b) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
    return b >= 0x80 && b <= 0xBF;
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        auto lead = static_cast<unsigned char>(s[i]);
        int len = sequence_length(lead);
        if (len == 0 || i + static_cast<std::size_t>(len) > s.size()) return i;
        if (len >= 2 && !second_byte_ok(lead, static_cast<unsigned char>(s[i + 1]))) return i;
        for (int k = 2; k < len; ++k) {
            auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
            if (b < 0x80 || b > 0xBF) return i;
        }
        i += static_cast<std::size_t>(len);
    }
    return s.size();
}

std::size_t complete_utf8_prefix(std::string_view s) {
    // Look back at most 3 bytes for a lead byte whose sequence is not yet complete.
    std::size_t n = s.size();
    for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
        auto b = static_cast<unsigned char>(s[n - back]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        int len = sequence_length(b);
        if (len > static_cast<int>(back)) return n - back;  // incomplete: hold it back
        return n;
    }
    return n;
}

}  // namespace brigade::model::text
