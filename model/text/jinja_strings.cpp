#include "model/text/jinja_strings.hpp"

#include <utf8proc.h>

#include <algorithm>

#include "model/text/jinja_value.hpp"

namespace brigade::model::text::jinja {

namespace {

struct CodePoint {
    std::uint32_t cp;
    std::size_t offset;
    std::size_t size;
};

std::vector<CodePoint> decode(std::string_view s) {
    std::vector<CodePoint> out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
        utf8proc_int32_t cp = 0;
        auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
        if (n <= 0) {  // invalid byte: keep it as a "code point" of its own
            out.push_back({static_cast<unsigned char>(s[i]), i, 1});
            ++i;
            continue;
        }
        out.push_back({static_cast<std::uint32_t>(cp), i, static_cast<std::size_t>(n)});
        i += static_cast<std::size_t>(n);
    }
    return out;
}

bool is_cased(std::uint32_t cp) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
           cat == UTF8PROC_CATEGORY_LT;
}

std::uint32_t to_upper(std::uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    return static_cast<std::uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
std::uint32_t to_lower(std::uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return static_cast<std::uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
std::uint32_t to_title(std::uint32_t cp) {
    if (cp < 0x80) return to_upper(cp);
    return static_cast<std::uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

bool is_line_break(std::uint32_t cp) {
    switch (cp) {
        case '\n':
        case '\r':
        case 0x0b:
        case 0x0c:
        case 0x1c:
        case 0x1d:
        case 0x1e:
        case 0x85:
        case 0x2028:
        case 0x2029:
            return true;
        default:
            return false;
    }
}

}  // namespace

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool is_py_space(std::uint32_t cp) {
    switch (cp) {
        case ' ':
        case '\t':
        case '\n':
        case '\r':
        case 0x0b:
        case 0x0c:
        case 0x1c:
        case 0x1d:
        case 0x1e:
        case 0x1f:
        case 0x85:
        case 0xa0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202f:
        case 0x205f:
        case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200a;
    }
}

std::string_view py_strip(std::string_view s, bool left, bool right,
                          std::optional<std::string_view> chars) {
    auto cps = decode(s);
    std::vector<std::uint32_t> set;
    if (chars) {
        for (const auto& c : decode(*chars)) set.push_back(c.cp);
    }
    auto strip_it = [&](std::uint32_t cp) {
        return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_py_space(cp);
    };
    std::size_t begin = 0;
    std::size_t end = cps.size();
    if (left) {
        while (begin < end && strip_it(cps[begin].cp)) ++begin;
    }
    if (right) {
        while (end > begin && strip_it(cps[end - 1].cp)) --end;
    }
    if (begin == end) return s.substr(0, 0);
    std::size_t from = cps[begin].offset;
    std::size_t to = cps[end - 1].offset + cps[end - 1].size;
    return s.substr(from, to - from);
}

std::vector<std::string> py_split(std::string_view s, std::optional<std::string_view> sep,
                                  std::int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) raise("ValueError", "empty separator");
        std::size_t pos = 0;
        while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
            auto hit = s.find(*sep, pos);
            if (hit == std::string_view::npos) break;
            out.emplace_back(s.substr(pos, hit - pos));
            pos = hit + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    auto cps = decode(s);
    std::size_t i = 0;
    while (i < cps.size()) {
        while (i < cps.size() && is_py_space(cps[i].cp)) ++i;
        if (i == cps.size()) break;
        if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
            // The remainder (trailing whitespace included) is the last piece.
            out.emplace_back(s.substr(cps[i].offset));
            return out;
        }
        std::size_t j = i;
        while (j < cps.size() && !is_py_space(cps[j].cp)) ++j;
        std::size_t from = cps[i].offset;
        std::size_t to = j < cps.size() ? cps[j].offset : s.size();
        out.emplace_back(s.substr(from, to - from));
        i = j;
    }
    return out;
}

std::vector<std::string> py_rsplit(std::string_view s, std::optional<std::string_view> sep,
                                   std::int64_t maxsplit) {
    if (maxsplit < 0) return py_split(s, sep, maxsplit);
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) raise("ValueError", "empty separator");
        std::size_t end = s.size();
        while (static_cast<std::int64_t>(out.size()) < maxsplit) {
            if (end < sep->size()) break;
            auto hit = s.rfind(*sep, end - sep->size());
            if (hit == std::string_view::npos) break;
            out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
            end = hit;
        }
        out.emplace_back(s.substr(0, end));
        std::reverse(out.begin(), out.end());
        return out;
    }
    auto cps = decode(s);
    std::size_t j = cps.size();
    while (j > 0) {
        while (j > 0 && is_py_space(cps[j - 1].cp)) --j;
        if (j == 0) break;
        if (static_cast<std::int64_t>(out.size()) == maxsplit) {
            std::size_t to = cps[j - 1].offset + cps[j - 1].size;
            out.emplace_back(s.substr(0, to));
            j = 0;
            break;
        }
        std::size_t i = j;
        while (i > 0 && !is_py_space(cps[i - 1].cp)) --i;
        std::size_t from = cps[i].offset;
        std::size_t to = cps[j - 1].offset + cps[j - 1].size;
        out.emplace_back(s.substr(from, to - from));
        j = i;
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> out;
    auto cps = decode(s);
    std::size_t start = 0;  // byte offset of the current line
    for (std::size_t i = 0; i < cps.size(); ++i) {
        if (!is_line_break(cps[i].cp)) continue;
        std::size_t content_end = cps[i].offset;
        std::size_t eol_end = cps[i].offset + cps[i].size;
        if (cps[i].cp == '\r' && i + 1 < cps.size() && cps[i + 1].cp == '\n') {
            ++i;
            eol_end += 1;
        }
        std::size_t line_end = keepends ? eol_end : content_end;
        out.emplace_back(s.substr(start, line_end - start));
        start = eol_end;
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    return out;
}

std::string py_upper(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const auto& c : decode(s)) append_utf8(out, to_upper(c.cp));
    return out;
}

std::string py_lower(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const auto& c : decode(s)) append_utf8(out, to_lower(c.cp));
    return out;
}

std::string py_title(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool prev_cased = false;
    for (const auto& c : decode(s)) {
        if (is_cased(c.cp)) {
            append_utf8(out, prev_cased ? to_lower(c.cp) : to_title(c.cp));
            prev_cased = true;
        } else {
            append_utf8(out, c.cp);
            prev_cased = false;
        }
    }
    return out;
}

std::string py_capitalize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool first = true;
    for (const auto& c : decode(s)) {
        append_utf8(out, first ? to_title(c.cp) : to_lower(c.cp));
        first = false;
    }
    return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       std::int64_t count) {
    std::string out;
    if (from.empty()) {
        // Python inserts `to` before every code point and at the end.
        auto cps = decode(s);
        std::int64_t done = 0;
        for (const auto& c : cps) {
            if (count < 0 || done < count) {
                out += to;
                ++done;
            }
            out += s.substr(c.offset, c.size);
        }
        if (count < 0 || done < count) out += to;
        return out;
    }
    std::size_t pos = 0;
    std::int64_t done = 0;
    while (count < 0 || done < count) {
        auto hit = s.find(from, pos);
        if (hit == std::string_view::npos) break;
        out += s.substr(pos, hit - pos);
        out += to;
        pos = hit + from.size();
        ++done;
    }
    out += s.substr(pos);
    return out;
}

std::int64_t py_count(std::string_view s, std::string_view needle) {
    if (needle.empty()) return static_cast<std::int64_t>(decode(s).size()) + 1;
    std::int64_t n = 0;
    std::size_t pos = 0;
    while ((pos = s.find(needle, pos)) != std::string_view::npos) {
        ++n;
        pos += needle.size();
    }
    return n;
}

std::int64_t py_find(std::string_view s, std::string_view needle) {
    auto hit = s.find(needle);
    if (hit == std::string_view::npos) return -1;
    std::int64_t cps = 0;
    for (std::size_t i = 0; i < hit; ++i) cps += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    return cps;
}

std::string unescape_string_literal(std::string_view body) {
    std::string out;
    out.reserve(body.size());
    auto hex_value = [&](std::size_t at, std::size_t n, const char* what) {
        if (at + n > body.size()) raise("TemplateSyntaxError", std::string("truncated ") + what);
        std::uint32_t v = 0;
        for (std::size_t k = 0; k < n; ++k) {
            char c = body[at + k];
            int d = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
            if (d < 0) raise("TemplateSyntaxError", std::string("truncated ") + what);
            v = v * 16 + static_cast<std::uint32_t>(d);
        }
        return v;
    };
    for (std::size_t i = 0; i < body.size(); ++i) {
        char c = body[i];
        if (c != '\\' || i + 1 >= body.size()) {
            out += c;
            continue;
        }
        char e = body[++i];
        switch (e) {
            case '\n':
                break;  // line continuation
            case '\\':
                out += '\\';
                break;
            case '\'':
                out += '\'';
                break;
            case '"':
                out += '"';
                break;
            case 'a':
                out += '\a';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'v':
                out += '\v';
                break;
            case 'x':
                append_utf8(out, hex_value(i + 1, 2, "\\xXX escape"));
                i += 2;
                break;
            case 'u':
                append_utf8(out, hex_value(i + 1, 4, "\\uXXXX escape"));
                i += 4;
                break;
            case 'U': {
                auto cp = hex_value(i + 1, 8, "\\UXXXXXXXX escape");
                if (cp > 0x10FFFF) raise("TemplateSyntaxError", "illegal Unicode character");
                append_utf8(out, cp);
                i += 8;
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    std::uint32_t v = static_cast<std::uint32_t>(e - '0');
                    for (int k = 0;
                         k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
                         ++k) {
                        v = v * 8 + static_cast<std::uint32_t>(body[++i] - '0');
                    }
                    append_utf8(out, v);
                } else {
                    out += '\\';
                    out += e;
                }
        }
    }
    return out;
}

}  // namespace brigade::model::text::jinja
