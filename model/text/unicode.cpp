#include "model/text/unicode.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace brigade::model::text {
namespace {

utf8proc_category_t category(char32_t cp) {
    return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_ascii(std::string_view s) {
    for (char c : s) {
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    }
    return true;
}

bool is_letter(char32_t cp) {
    auto c = category(cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

}  // namespace

std::size_t utf8_sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

char32_t next_code_point(std::string_view s, std::size_t& i) {
    auto lead = static_cast<unsigned char>(s[i]);
    std::size_t len = utf8_sequence_length(lead);
    if (len == 1 || i + len > s.size()) {
        ++i;
        return lead;
    }
    char32_t cp = lead & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k) {
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    i += len;
    return cp;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_whitespace(char32_t cp) {
    // The White_Space property list (PropList.txt), which is what Rust uses.
    if (cp >= 0x09 && cp <= 0x0D) return true;
    switch (cp) {
        case 0x20:
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000:
            return true;
        default:
            break;
    }
    return cp >= 0x2000 && cp <= 0x200A;
}

bool is_numeric(char32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    auto c = category(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t cp) {
    if (cp < 0x80) {
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    }
    return is_letter(cp) || is_numeric(cp);
}

bool is_word_char(char32_t cp) {
    if (cp < 0x80) {
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
               cp == '_';
    }
    if (cp == 0x200C || cp == 0x200D) return true;
    auto c = category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ND) || c == UTF8PROC_CATEGORY_NL ||
           c == UTF8PROC_CATEGORY_PC;
}

bool is_punctuation(char32_t cp) {
    if (cp < 0x80) {
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    }
    auto c = category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_nonspacing_mark(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_MN; }

bool is_control(char32_t cp) {
    auto c = category(cp);
    return c == UTF8PROC_CATEGORY_CN || c >= UTF8PROC_CATEGORY_CC;
}

bool is_chinese_char(char32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::string normalize_unicode(std::string_view s, NormalForm form) {
    // Every normal form leaves ASCII unchanged; most LLM input is ASCII, so skip utf8proc.
    if (is_ascii(s)) return std::string(s);
    int options = UTF8PROC_STABLE;
    switch (form) {
        case NormalForm::nfc:
            options |= UTF8PROC_COMPOSE;
            break;
        case NormalForm::nfd:
            options |= UTF8PROC_DECOMPOSE;
            break;
        case NormalForm::nfkc:
            options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
            break;
        case NormalForm::nfkd:
            options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
            break;
    }
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                      static_cast<utf8proc_ssize_t>(s.size()), &out,
                                      static_cast<utf8proc_option_t>(options));
    if (n < 0) {
        // Only reachable with invalid UTF-8, which callers reject earlier; keep the text as is.
        std::free(out);
        return std::string(s);
    }
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
    return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

std::string to_lowercase(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    std::size_t i = 0;
    char32_t prev = 0;
    while (i < s.size()) {
        char32_t cp = next_code_point(s, i);
        if (cp < 0x80) {
            out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
        } else if (cp == 0x130) {
            out += "i\xCC\x87";  // İ lowercases to i + U+0307 COMBINING DOT ABOVE
        } else if (cp == 0x3A3) {
            // Final sigma: after a letter and not before one (Rust applies the same rule).
            std::size_t j = i;
            bool next_is_letter = j < s.size() && is_letter(next_code_point(s, j));
            append_utf8(out, prev != 0 && is_letter(prev) && !next_is_letter ? 0x3C2 : 0x3C3);
        } else {
            append_utf8(out,
                        static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
        }
        prev = cp;
    }
    return out;
}

std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    std::size_t i = 0;
    const std::size_t n = bytes.size();
    while (i < n) {
        auto lead = static_cast<unsigned char>(bytes[i]);
        if (lead < 0x80) {
            out.push_back(static_cast<char>(lead));
            ++i;
            continue;
        }
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
        if (lead >= 0xC2 && lead <= 0xDF) {
            len = 2;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            len = 3;
            if (lead == 0xE0) lo = 0xA0;
            if (lead == 0xED) hi = 0x9F;
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            len = 4;
            if (lead == 0xF0) lo = 0x90;
            if (lead == 0xF4) hi = 0x8F;
        }
        if (len == 0) {
            out += kReplacementChar;
            ++i;
            continue;
        }
        // Count how many bytes of the sequence are well formed; a short or broken sequence is
        // replaced as one unit (the "maximal subpart" rule Rust and WHATWG follow).
        std::size_t good = 1;
        while (good < len && i + good < n) {
            auto b = static_cast<unsigned char>(bytes[i + good]);
            bool ok = good == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
            if (!ok) break;
            ++good;
        }
        if (good == len) {
            out.append(bytes.substr(i, len));
        } else {
            out += kReplacementChar;
        }
        i += good;
    }
    return out;
}

}  // namespace brigade::model::text
