#include "model/text/byte_level.hpp"

#include <array>

#include "model/text/unicode.hpp"

namespace brigade::model::text {
namespace {

struct ByteLevelTables {
    std::array<char32_t, 256> byte_to_cp{};
    std::array<std::string, 256> byte_to_utf8;
    std::array<int16_t, 512> cp_to_byte{};  // every stand-in is below U+0144

    ByteLevelTables() {
        cp_to_byte.fill(-1);
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            char32_t cp =
                printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
            byte_to_cp[b] = cp;
            append_utf8(byte_to_utf8[b], cp);
            cp_to_byte[cp] = static_cast<int16_t>(b);
        }
    }
};

const ByteLevelTables& tables() {
    static const ByteLevelTables t;  // immutable after first use
    return t;
}

}  // namespace

void append_byte_level(std::string& out, std::string_view bytes) {
    const auto& t = tables();
    for (char c : bytes) out += t.byte_to_utf8[static_cast<unsigned char>(c)];
}

int byte_level_to_byte(char32_t cp) {
    if (cp >= 512) return -1;
    return tables().cp_to_byte[cp];
}

bool byte_level_decode(std::string_view token, std::string& out) {
    const auto& t = tables();
    std::size_t mark = out.size();
    std::size_t i = 0;
    while (i < token.size()) {
        char32_t cp = next_code_point(token, i);
        int b = cp < 512 ? t.cp_to_byte[cp] : -1;
        if (b < 0) {
            out.resize(mark);
            return false;
        }
        out.push_back(static_cast<char>(b));
    }
    return true;
}

}  // namespace brigade::model::text
