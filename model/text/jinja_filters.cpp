// Filters on scalars and strings, `tojson`, and the filter dispatcher. The sequence filters
// (select, map, sort, ...) are in jinja_filters_seq.cpp.

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "model/text/jinja_builtins.hpp"
#include "model/text/jinja_parser.hpp"
#include "model/text/jinja_strings.hpp"

namespace brigade::model::text::jinja {

const Value& required_arg(const CallArgs& args, std::size_t index, std::string_view name,
                          std::string_view filter) {
    const Value* v = args.get(index, name);
    if (!v) {
        type_error(std::string(filter) + "() missing required argument '" + std::string(name) +
                   "'");
    }
    return *v;
}

bool bool_arg(const CallArgs& args, std::size_t index, std::string_view name, bool fallback) {
    const Value* v = args.get(index, name);
    return v ? v->truthy() : fallback;
}

namespace {

std::string soft_str(const Value& v) { return to_str(v); }

Value keep_markup(const Value& input, std::string s);

Value f_trim(Renderer&, const Value& v, CallArgs& args) {
    std::optional<std::string_view> chars;
    const Value* c = args.get(0, "chars");
    if (c && !c->is_none()) chars = std::string_view(c->str());
    std::string s = soft_str(v);
    return keep_markup(v, std::string(py_strip(s, true, true, chars)));
}

Value f_upper(Renderer&, const Value& v, CallArgs&) {
    return keep_markup(v, py_upper(soft_str(v)));
}
Value f_lower(Renderer&, const Value& v, CallArgs&) {
    return keep_markup(v, py_lower(soft_str(v)));
}
Value f_capitalize(Renderer&, const Value& v, CallArgs&) {
    return keep_markup(v, py_capitalize(soft_str(v)));
}

// jinja2's `title`: upper-case the first letter of each word (a word starts after one of
// "-", whitespace, "(", "{", "[", "<"), lower-case the rest.
Value f_title(Renderer&, const Value& v, CallArgs&) {
    std::string s = soft_str(v);
    std::string out;
    bool word_start = true;
    for (auto cp : split_code_points(s)) {
        std::string c(cp);
        bool sep = c == "-" || c == "(" || c == "{" || c == "[" || c == "<" ||
                   py_strip(c, true, true).empty();
        if (sep) {
            out += c;
            word_start = true;
        } else {
            out += word_start ? py_upper(c) : py_lower(c);
            word_start = false;
        }
    }
    return Value(std::move(out));
}

Value f_replace(Renderer&, const Value& v, CallArgs& args) {
    std::string s = soft_str(v);
    std::string from = soft_str(required_arg(args, 0, "old", "replace"));
    std::string to = soft_str(required_arg(args, 1, "new", "replace"));
    const Value* count = args.get(2, "count");
    std::int64_t n = (count && count->is_int()) ? count->as_int() : -1;
    return Value(py_replace(s, from, to, n));
}

Value f_string(Renderer&, const Value& v, CallArgs&) { return Value(soft_str(v)); }
Value f_safe(Renderer&, const Value& v, CallArgs&) { return Value::markup(soft_str(v)); }

Value f_escape(Renderer&, const Value& v, CallArgs&) {
    if (v.is_markup()) return v;  // already safe
    return Value::markup(html_escape(soft_str(v)));
}

Value f_forceescape(Renderer&, const Value& v, CallArgs&) {
    return Value::markup(html_escape(soft_str(v)));
}

// Markup stays Markup through its string methods (markupsafe wraps their results).
Value keep_markup(const Value& input, std::string s) {
    return input.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

Value f_default(Renderer&, const Value& v, CallArgs& args) {
    const Value* fallback = args.get(0, "default_value");
    bool boolean = bool_arg(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback ? *fallback : Value("");
    return v;
}

Value f_length(Renderer&, const Value& v, CallArgs&) { return Value(length(v)); }

std::optional<std::int64_t> parse_int(std::string_view text, int base) {
    std::string s(py_strip(text, true, true));
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long n = std::strtoll(s.c_str(), &end, base);
    if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
    return n;
}

std::optional<double> parse_float(std::string_view text) {
    std::string s(py_strip(text, true, true));
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return d;
}

Value f_int(Renderer&, const Value& v, CallArgs& args) {
    const Value* fallback = args.get(0, "default");
    const Value* base_arg = args.get(1, "base");
    int base = base_arg && base_arg->is_int() ? static_cast<int>(base_arg->as_int()) : 10;
    Value def = fallback ? *fallback : Value(std::int64_t{0});
    if (v.is_int()) return v;
    if (v.is_bool()) return Value(std::int64_t{v.as_bool()});
    if (v.is_float()) {
        double d = v.as_float();
        if (!std::isfinite(d)) return def;
        return Value(static_cast<std::int64_t>(std::trunc(d)));
    }
    if (v.is_string()) {
        if (auto n = parse_int(v.str(), base)) return Value(*n);
        if (auto d = parse_float(v.str()); d && std::isfinite(*d)) {
            return Value(static_cast<std::int64_t>(std::trunc(*d)));
        }
    }
    return def;
}

Value f_float(Renderer&, const Value& v, CallArgs& args) {
    const Value* fallback = args.get(0, "default");
    Value def = fallback ? *fallback : Value(0.0);
    if (v.is_number()) return Value(v.to_double());
    if (v.is_string()) {
        if (auto d = parse_float(v.str())) return Value(*d);
    }
    return def;
}

Value f_abs(Renderer&, const Value& v, CallArgs&) {
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    if (v.is_int()) return Value(v.as_int() < 0 ? negate(v) : v);
    if (v.is_bool()) return Value(std::int64_t{v.as_bool()});
    if (v.is_undefined()) fail_undefined(v);
    type_error("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Renderer&, const Value& v, CallArgs& args) {
    const Value* p = args.get(0, "precision");
    std::int64_t precision = p && p->is_int() ? p->as_int() : 0;
    const Value* m = args.get(1, "method");
    std::string method = m ? soft_str(*m) : "common";
    if (method != "common" && method != "ceil" && method != "floor") {
        raise("FilterArgumentError", "method must be common, ceil or floor");
    }
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) type_error("type " + v.type_name() + " doesn't define __round__ method");
    if (method == "common" && (v.is_int() || v.is_bool()))
        return Value(std::int64_t{v.is_bool() ? v.as_bool() : v.as_int()});
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.to_double() * scale;
    double r = method == "ceil"    ? std::ceil(x)
               : method == "floor" ? std::floor(x)
                                   : std::nearbyint(x);
    return Value(r / scale);
}

Value f_center(Renderer&, const Value& v, CallArgs& args) {
    std::string s = soft_str(v);
    const Value* w = args.get(0, "width");
    std::int64_t width = w && w->is_int() ? w->as_int() : 80;
    std::int64_t n = length(Value(s));
    if (width <= n) return Value(s);
    std::int64_t pad = width - n;
    // CPython: left = pad/2 + (pad & width & 1)
    std::int64_t left = pad / 2 + (pad & width & 1);
    return Value(std::string(static_cast<std::size_t>(left), ' ') + s +
                 std::string(static_cast<std::size_t>(pad - left), ' '));
}

Value f_indent(Renderer&, const Value& v, CallArgs& args) {
    const Value* w = args.get(0, "width");
    std::string indention = !w ? "    "
                            : w->is_string()
                                ? w->str()
                                : std::string(static_cast<std::size_t>(std::max<std::int64_t>(
                                                  0, w->is_int() ? w->as_int() : 4)),
                                              ' ');
    bool first = bool_arg(args, 1, "first", false);
    bool blank = bool_arg(args, 2, "blank", false);
    std::string s = soft_str(v) + "\n";  // jinja2's trick for trailing newlines
    std::vector<std::string> lines = py_splitlines(s, false);
    std::string rv;
    if (blank) {
        for (std::size_t i = 0; i < lines.size(); ++i) {
            if (i) rv += "\n" + indention;
            rv += lines[i];
        }
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (std::size_t i = 1; i < lines.size(); ++i) {
            rv += "\n";
            if (!lines[i].empty()) rv += indention;
            rv += lines[i];
        }
    }
    if (first) rv = indention + rv;
    return Value(std::move(rv));
}

Value f_wordcount(Renderer&, const Value& v, CallArgs&) {
    std::int64_t n = 0;
    bool in_word = false;
    // Named: a range-for keeps only the outermost temporary alive, and the code points are
    // views into this string (AddressSanitizer found them read after the string was gone).
    const std::string s = soft_str(v);
    for (auto cp : split_code_points(s)) {
        unsigned char c = static_cast<unsigned char>(cp[0]);
        bool word = cp.size() > 1 || std::isalnum(c) || c == '_';
        if (word && !in_word) ++n;
        in_word = word;
    }
    return Value(n);
}

Value f_format(Renderer&, const Value& v, CallArgs& args) {
    if (!args.keyword.empty()) {
        Mapping m;
        for (const auto& [k, val] : args.keyword) m.set(Value(k), val);
        return Value(percent_format(soft_str(v), Value::dict(std::move(m))));
    }
    return Value(percent_format(soft_str(v), Value::tuple(args.positional)));
}

Value f_truncate(Renderer&, const Value& v, CallArgs& args) {
    std::string s = soft_str(v);
    const Value* l = args.get(0, "length");
    std::int64_t len = l && l->is_int() ? l->as_int() : 255;
    bool killwords = bool_arg(args, 1, "killwords", false);
    const Value* e = args.get(2, "end");
    std::string end = e ? soft_str(*e) : "...";
    const Value* lw = args.get(3, "leeway");
    std::int64_t leeway = lw && lw->is_int() ? lw->as_int() : 5;
    auto cps = split_code_points(s);
    auto n = static_cast<std::int64_t>(cps.size());
    if (n <= len + leeway) return Value(s);
    std::int64_t keep = std::max<std::int64_t>(0, len - length(Value(end)));
    std::string head;
    for (std::int64_t i = 0; i < keep; ++i) head += cps[static_cast<std::size_t>(i)];
    if (killwords) return Value(head + end);
    auto cut = head.rfind(' ');
    if (cut != std::string::npos) head = head.substr(0, cut);
    return Value(head + end);
}

Value f_striptags(Renderer&, const Value& v, CallArgs&) {
    std::string s = soft_str(v);
    std::string out;
    bool in_tag = false;
    for (char c : s) {
        if (c == '<') in_tag = true;
        if (!in_tag) out += c;
        if (c == '>') in_tag = false;
    }
    auto words = py_split(out, std::nullopt, -1);
    std::string joined;
    for (std::size_t i = 0; i < words.size(); ++i) joined += (i ? " " : "") + words[i];
    return Value(std::move(joined));
}

Value f_pprint(Renderer&, const Value& v, CallArgs&) { return Value(repr(v)); }

Value f_tojson(Renderer&, const Value& v, CallArgs& args) {
    // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonStyle style;
    const Value* indent = args.get(1, "indent");
    if (indent && !indent->is_none()) {
        style.pretty = true;
        if (indent->is_string()) {
            style.indent = indent->str();
        } else if (indent->is_int()) {
            style.indent.assign(
                static_cast<std::size_t>(std::clamp<std::int64_t>(indent->as_int(), 0, 64)), ' ');
        } else {
            type_error("indent must be an int or a string");
        }
        style.item_sep.assign(1, ',');  // (not = ",": GCC 12 warns falsely on it here)
    }
    const Value* seps = args.get(2, "separators");
    if (seps && !seps->is_none()) {
        if (!seps->is_list_like() || seps->items().size() != 2 || !seps->items()[0].is_string() ||
            !seps->items()[1].is_string()) {
            type_error("separators must be a (item_separator, key_separator) pair of strings");
        }
        style.item_sep = seps->items()[0].str();
        style.key_sep = seps->items()[1].str();
    }
    style.sort_keys = bool_arg(args, 3, "sort_keys", false);
    style.ensure_ascii = bool_arg(args, 0, "ensure_ascii", false);
    return Value(to_json(v, style));
}

Value f_attr(Renderer& r, const Value& v, CallArgs& args) {
    const Value& name = required_arg(args, 0, "name", "attr");
    return r.get_attr(v, soft_str(name));
}

constexpr auto kFilters = std::to_array<FilterEntry>({
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"e", f_escape},
    {"escape", f_escape},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"length", f_length},
    {"lower", f_lower},
    {"pprint", f_pprint},
    {"replace", f_replace},
    {"round", f_round},
    {"safe", f_safe},
    {"string", f_string},
    {"striptags", f_striptags},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
});

const FilterFn* find_scalar_filter(std::string_view name) {
    for (const auto& f : kFilters) {
        if (f.name == name) return &f.fn;
    }
    return nullptr;
}

}  // namespace

bool is_known_filter(std::string_view name) {
    return find_scalar_filter(name) || find_sequence_filter(name);
}

bool is_known_test(std::string_view name) { return find_test(name) != nullptr; }

Value Renderer::apply_filter(std::string_view name, const Value& subject, CallArgs& args) {
    tick();
    const FilterFn* fn = find_scalar_filter(name);
    if (!fn) fn = find_sequence_filter(name);
    if (!fn) raise("TemplateRuntimeError", "No filter named '" + std::string(name) + "' found.");
    return (*fn)(*this, subject, args);
}

bool Renderer::apply_test(std::string_view name, const Value& subject, CallArgs& args) {
    tick();
    const TestFn* fn = find_test(name);
    if (!fn) raise("TemplateRuntimeError", "No test named '" + std::string(name) + "' found.");
    return (*fn)(*this, subject, args);
}

}  // namespace brigade::model::text::jinja
