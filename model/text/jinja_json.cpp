// `tojson` as transformers defines it: Python's `json.dumps(x, ensure_ascii=False, indent=...,
// separators=..., sort_keys=...)`. nlohmann's dump() differs in separators (",", ":"), float
// formatting and key order, so this is a dumper of our own.

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/text/jinja_value.hpp"

namespace brigade::model::text::jinja {

namespace {

void append_escaped_code_point(std::string& out, std::uint32_t cp) {
    char buf[16];
    if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                      0xDC00 + (cp & 0x3FF));
    } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    out += buf;
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    for (std::size_t i = 0; i < s.size(); ++i) {
        char ch = s[i];
        auto c = static_cast<unsigned char>(ch);
        if (ensure_ascii && c >= 0x80) {
            std::size_t n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            if (i + n > s.size()) n = s.size() - i;
            std::uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
            for (std::size_t k = 1; k < n; ++k)
                cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            append_escaped_code_point(out, cp);
            i += n - 1;
            continue;
        }
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;  // ensure_ascii=False: UTF-8 passes through
                }
        }
    }
    out += '"';
}

// json.dumps turns non-string keys into strings: True -> "true", None -> "null", 1.5 -> "1.5".
std::string key_string(const Value& k) {
    switch (k.kind()) {
        case Kind::string:
            return k.str();
        case Kind::boolean:
            return k.as_bool() ? "true" : "false";
        case Kind::none:
            return "null";
        case Kind::integer:
            return std::to_string(k.as_int());
        case Kind::floating:
            return float_repr(k.as_float());
        default:
            type_error("keys must be str, int, float, bool or None, not " + k.type_name());
    }
}

void newline(std::string& out, const JsonStyle& style, int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += style.indent;
}

void dump(std::string& out, const Value& v, const JsonStyle& style, int level) {
    if (level > 500) raise("RecursionError", "maximum recursion depth exceeded in tojson");
    switch (v.kind()) {
        case Kind::none:
            out += "null";
            return;
        case Kind::boolean:
            out += v.as_bool() ? "true" : "false";
            return;
        case Kind::integer:
            out += std::to_string(v.as_int());
            return;
        case Kind::floating: {
            double d = v.as_float();
            if (std::isnan(d)) {
                out += "NaN";
            } else if (std::isinf(d)) {
                out += d > 0 ? "Infinity" : "-Infinity";
            } else {
                out += float_repr(d);
            }
            return;
        }
        case Kind::string:
            append_json_string(out, v.str(), style.ensure_ascii);
            return;
        case Kind::sequence: {
            if (v.is_generator()) type_error("Object of type generator is not JSON serializable");
            const auto& items = v.items();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (std::size_t i = 0; i < items.size(); ++i) {
                if (i) out += style.item_sep;
                if (style.pretty) newline(out, style, level + 1);
                dump(out, items[i], style, level + 1);
            }
            if (style.pretty) newline(out, style, level);
            out += ']';
            return;
        }
        case Kind::mapping: {
            const auto& items = v.map().items;
            if (items.empty()) {
                out += "{}";
                return;
            }
            std::vector<std::pair<std::string, const Value*>> entries;
            entries.reserve(items.size());
            for (const auto& [k, val] : items) entries.emplace_back(key_string(k), &val);
            if (style.sort_keys) {
                std::stable_sort(entries.begin(), entries.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            }
            out += '{';
            for (std::size_t i = 0; i < entries.size(); ++i) {
                if (i) out += style.item_sep;
                if (style.pretty) newline(out, style, level + 1);
                append_json_string(out, entries[i].first, style.ensure_ascii);
                out += style.key_sep;
                dump(out, *entries[i].second, style, level + 1);
            }
            if (style.pretty) newline(out, style, level);
            out += '}';
            return;
        }
        default: {
            std::string type = v.is_undefined() ? "Undefined" : v.type_name();
            type_error("Object of type " + type + " is not JSON serializable");
        }
    }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
    std::string out;
    dump(out, v, style, 0);
    return out;
}

nlohmann::ordered_json to_ordered_json(const Value& v) {
    switch (v.kind()) {
        case Kind::none:
        case Kind::undefined:
            return nullptr;
        case Kind::boolean:
            return v.as_bool();
        case Kind::integer:
            return v.as_int();
        case Kind::floating:
            return v.as_float();
        case Kind::string:
            return v.str();
        case Kind::sequence: {
            auto arr = nlohmann::ordered_json::array();
            for (const auto& item : v.items()) arr.push_back(to_ordered_json(item));
            return arr;
        }
        case Kind::mapping: {
            auto obj = nlohmann::ordered_json::object();
            for (const auto& [k, val] : v.map().items) obj[to_str(k)] = to_ordered_json(val);
            return obj;
        }
        default:
            return to_str(v);
    }
}

}  // namespace brigade::model::text::jinja
