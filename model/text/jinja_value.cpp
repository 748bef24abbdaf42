#include "model/text/jinja_value.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace brigade::model::text::jinja {

void raise(std::string kind, std::string message) {
    throw TemplateException{std::move(kind), std::move(message), 0};
}

void fail_undefined(const Value& v) {
    const Undefined& u = v.undef();
    if (u.unsafe) raise("SecurityError", u.hint ? *u.hint : "unsafe access");
    raise("UndefinedError", u.hint ? *u.hint : "value is undefined");
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// ---- Mapping ------------------------------------------------------------------------------

const Value* Mapping::find(const Value& key) const {
    if (key.is_string()) return find(std::string_view(key.str()));
    for (const auto& [k, v] : items) {
        if (equals(k, key)) return &v;
    }
    return nullptr;
}

const Value* Mapping::find(std::string_view key) const {
    for (const auto& [k, v] : items) {
        if (k.is_string() && k.str() == key) return &v;
    }
    return nullptr;
}

void Mapping::set(Value key, Value value) {
    for (auto& [k, v] : items) {
        if (equals(k, key)) {
            v = std::move(value);
            return;
        }
    }
    items.emplace_back(std::move(key), std::move(value));
}

// ---- Object -------------------------------------------------------------------------------

Value Object::get_attr(std::string_view name) const {
    return Value::undefined(std::string("'")
                                .append(type_name())
                                .append(" object' has no attribute '")
                                .append(name)
                                .append("'"));
}

bool Object::set_attr(std::string_view, Value) { return false; }

std::string Object::repr() const { return std::string("<").append(type_name()).append(" object>"); }

Value Object::call(Renderer&, CallArgs&) const {
    type_error("'" + std::string(type_name()) + "' object is not callable");
}

// ---- Value --------------------------------------------------------------------------------

Value Value::undefined(std::string hint, bool unsafe) {
    return Value(Undefined{std::make_shared<const std::string>(std::move(hint)), unsafe});
}

int nesting_depth(const Value& v) {
    switch (v.kind()) {
        case Kind::sequence:
            return v.seq().depth;
        case Kind::mapping:
            return v.map().depth;
        case Kind::object:
            return v.obj()->depth();
        default:
            return 0;
    }
}

namespace {

int checked_depth(int child_depth) {
    if (child_depth + 1 > kMaxValueDepth) {
        raise("RecursionError", "value nesting deeper than " + std::to_string(kMaxValueDepth));
    }
    return child_depth + 1;
}

}  // namespace

Value Value::list(std::vector<Value> items, SeqFlavor flavor) {
    auto s = std::make_shared<Sequence>();
    int deepest = 0;
    for (const auto& item : items) deepest = std::max(deepest, nesting_depth(item));
    s->depth = checked_depth(deepest);
    s->items = std::move(items);
    s->flavor = flavor;
    return Value(std::move(s));
}

Value Value::dict(Mapping m) {
    int deepest = 0;
    for (const auto& [k, v] : m.items) deepest = std::max(deepest, nesting_depth(v));
    m.depth = checked_depth(deepest);
    return Value(std::make_shared<Mapping>(std::move(m)));
}
Value Value::object(ObjectPtr o) { return Value(std::move(o)); }
Value Value::callable(CallablePtr f) { return Value(std::move(f)); }

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
    using T = nlohmann::ordered_json::value_t;
    if (depth >= kMaxValueDepth) {
        raise("RecursionError", "JSON nested deeper than " + std::to_string(kMaxValueDepth));
    }
    switch (j.type()) {
        case T::null:
        case T::discarded:
            return none();
        case T::boolean:
            return Value(j.get<bool>());
        case T::number_integer:
            return Value(j.get<std::int64_t>());
        case T::number_unsigned: {
            auto u = j.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
            return Value(static_cast<std::int64_t>(u));
        }
        case T::number_float:
            return Value(j.get<double>());
        case T::string:
            return Value(j.get<std::string>());
        case T::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e, depth + 1));
            return list(std::move(items));
        }
        case T::object: {
            Mapping m;
            m.items.reserve(j.size());
            for (auto it = j.begin(); it != j.end(); ++it) {
                m.items.emplace_back(Value(it.key()), from_json(it.value(), depth + 1));
            }
            return dict(std::move(m));
        }
        case T::binary:
            break;
    }
    return none();
}

bool Value::is_list_like() const { return is_sequence() && seq().flavor != SeqFlavor::generator; }
bool Value::is_generator() const { return is_sequence() && seq().flavor == SeqFlavor::generator; }
bool Value::is_callable() const {
    return kind() == Kind::callable || (is_object() && obj()->callable());
}

double Value::to_double() const {
    switch (kind()) {
        case Kind::boolean:
            return as_bool() ? 1.0 : 0.0;
        case Kind::integer:
            return static_cast<double>(as_int());
        case Kind::floating:
            return as_float();
        default:
            type_error("must be real number, not " + type_name());
    }
}

bool Value::truthy() const {
    switch (kind()) {
        case Kind::undefined:
        case Kind::none:
            return false;
        case Kind::boolean:
            return as_bool();
        case Kind::integer:
            return as_int() != 0;
        case Kind::floating:
            return as_float() != 0.0;
        case Kind::string:
            return !str().empty();
        case Kind::sequence:
            return is_generator() || !items().empty();
        case Kind::mapping:
            return !map().items.empty();
        case Kind::object:
        case Kind::callable:
            return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (kind()) {
        case Kind::undefined:
            return "Undefined";
        case Kind::none:
            return "NoneType";
        case Kind::boolean:
            return "bool";
        case Kind::integer:
            return "int";
        case Kind::floating:
            return "float";
        case Kind::string:
            return "str";
        case Kind::sequence:
            switch (seq().flavor) {
                case SeqFlavor::list:
                    return "list";
                case SeqFlavor::tuple:
                    return "tuple";
                case SeqFlavor::generator:
                    return "generator";
            }
            return "list";
        case Kind::mapping:
            return "dict";
        case Kind::object:
            return std::string(obj()->type_name());
        case Kind::callable:
            return "function";
    }
    return "object";
}

// ---- Printing -----------------------------------------------------------------------------

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
    // Shortest round-trip digits, then Python's layout: positional for exponents in
    // [-4, 16), scientific (at least two exponent digits) elsewhere.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    bool negative = sci[0] == '-';
    if (negative) sci.erase(0, 1);
    auto e_pos = sci.find('e');
    std::string mantissa = sci.substr(0, e_pos);
    int exponent = std::stoi(sci.substr(e_pos + 1));
    std::string digits;
    for (char c : mantissa) {
        if (c != '.') digits += c;
    }
    std::string out = negative ? "-" : "";
    int decpt = exponent + 1;  // position of the decimal point relative to the digits
    if (decpt > 16 || decpt < -3) {
        out += digits[0];
        if (digits.size() > 1) {
            out += '.';
            out += digits.substr(1);
        }
        char exp_buf[16];
        std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+',
                      std::abs(exponent));
        out += exp_buf;
    } else if (decpt <= 0) {
        out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
    } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
        out += digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
        out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." +
               digits.substr(static_cast<std::size_t>(decpt));
    }
    return out;
}

namespace {

bool printable(std::int32_t cp) {
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    switch (utf8proc_category(cp)) {
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO:
        case UTF8PROC_CATEGORY_CN:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
        case UTF8PROC_CATEGORY_ZS:
            return false;
        default:
            return true;
    }
}

void append_string_repr(std::string& out, const std::string& s) {
    bool has_single = s.find('\'') != std::string::npos;
    bool has_double = s.find('"') != std::string::npos;
    char quote = (has_single && !has_double) ? '"' : '\'';
    out += quote;
    std::size_t i = 0;
    while (i < s.size()) {
        utf8proc_int32_t cp = 0;
        auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
        if (n <= 0) {  // not UTF-8: show the byte
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(s[i]));
            out += b;
            ++i;
            continue;
        }
        if (cp == '\\' || cp == quote) {
            out += '\\';
            out += static_cast<char>(cp);
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (!printable(cp)) {
            char b[16];
            if (cp < 0x100) {
                std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(cp));
            } else if (cp < 0x10000) {
                std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(cp));
            } else {
                std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(cp));
            }
            out += b;
        } else {
            out.append(s, i, static_cast<std::size_t>(n));
        }
        i += static_cast<std::size_t>(n);
    }
    out += quote;
}

void append_repr(std::string& out, const Value& v, int depth);

void append_container(std::string& out, const Value& v, int depth) {
    if (depth > kMaxValueDepth)
        raise("RecursionError", "maximum recursion depth exceeded while printing");
    if (v.is_sequence()) {
        const auto& s = v.seq();
        if (s.flavor == SeqFlavor::generator) {
            out += "<generator object>";
            return;
        }
        bool tuple = s.flavor == SeqFlavor::tuple;
        out += tuple ? '(' : '[';
        for (std::size_t i = 0; i < s.items.size(); ++i) {
            if (i) out += ", ";
            append_repr(out, s.items[i], depth + 1);
        }
        if (tuple && s.items.size() == 1) out += ',';
        out += tuple ? ')' : ']';
        return;
    }
    out += '{';
    bool first = true;
    for (const auto& [k, val] : v.map().items) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k, depth + 1);
        out += ": ";
        append_repr(out, val, depth + 1);
    }
    out += '}';
}

void append_repr(std::string& out, const Value& v, int depth) {
    switch (v.kind()) {
        case Kind::undefined:
            out += "Undefined";
            return;
        case Kind::string:
            append_string_repr(out, v.str());
            return;
        case Kind::sequence:
        case Kind::mapping:
            append_container(out, v, depth);
            return;
        case Kind::object:
            out += v.obj()->repr();
            return;
        default:
            append_str(out, v);
    }
}

}  // namespace

void append_str(std::string& out, const Value& v) {
    switch (v.kind()) {
        case Kind::undefined:
            return;
        case Kind::none:
            out += "None";
            return;
        case Kind::boolean:
            out += v.as_bool() ? "True" : "False";
            return;
        case Kind::integer:
            out += std::to_string(v.as_int());
            return;
        case Kind::floating:
            out += float_repr(v.as_float());
            return;
        case Kind::string:
            out += v.str();
            return;
        case Kind::sequence:
        case Kind::mapping:
            append_container(out, v, 0);
            return;
        case Kind::object:
            out += v.obj()->repr();
            return;
        case Kind::callable:
            out += "<function " + v.fn()->name() + ">";
            return;
    }
}

std::string to_str(const Value& v) {
    if (v.is_string()) return v.str();
    std::string out;
    append_str(out, v);
    return out;
}

std::string repr(const Value& v) {
    std::string out;
    append_repr(out, v, 0);
    return out;
}

// ---- Comparison ---------------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
        auto ai = a.is_bool() ? std::int64_t{a.as_bool()} : a.as_int();
        auto bi = b.is_bool() ? std::int64_t{b.as_bool()} : b.as_int();
        return ai == bi;
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Kind::undefined:
        case Kind::none:
            return true;
        case Kind::string:
            return a.str() == b.str();
        case Kind::sequence: {
            if (&a.seq() == &b.seq()) return true;
            bool a_tuple = a.seq().flavor == SeqFlavor::tuple;
            bool b_tuple = b.seq().flavor == SeqFlavor::tuple;
            if (a.is_generator() || b.is_generator() || a_tuple != b_tuple) return false;
            const auto& x = a.items();
            const auto& y = b.items();
            if (x.size() != y.size()) return false;
            for (std::size_t i = 0; i < x.size(); ++i) {
                if (!equals(x[i], y[i])) return false;
            }
            return true;
        }
        case Kind::mapping: {
            const auto& x = a.map().items;
            if (x.size() != b.map().items.size()) return false;
            for (const auto& [k, v] : x) {
                const Value* other = b.map().find(k);
                if (!other || !equals(v, *other)) return false;
            }
            return true;
        }
        case Kind::object:
            return a.obj() == b.obj();
        case Kind::callable:
            return a.fn() == b.fn();
        default:
            return false;
    }
}

bool less_than(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.to_double() < b.to_double();
        auto ai = a.is_bool() ? std::int64_t{a.as_bool()} : a.as_int();
        auto bi = b.is_bool() ? std::int64_t{b.as_bool()} : b.as_int();
        return ai < bi;
    }
    // UTF-8 byte order is code point order, which is how Python orders strings.
    if (a.is_string() && b.is_string()) return a.str() < b.str();
    if (a.is_list_like() && b.is_list_like() && a.seq().flavor == b.seq().flavor) {
        const auto& x = a.items();
        const auto& y = b.items();
        for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
        }
        return x.size() < y.size();
    }
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    type_error("'<' not supported between instances of '" + a.type_name() + "' and '" +
               b.type_name() + "'");
}

bool contains(const Value& haystack, const Value& needle) {
    switch (haystack.kind()) {
        case Kind::string:
            if (!needle.is_string()) {
                if (needle.is_undefined()) fail_undefined(needle);
                type_error("'in <string>' requires string as left operand, not " +
                           needle.type_name());
            }
            return haystack.str().find(needle.str()) != std::string::npos;
        case Kind::mapping:
            return haystack.map().find(needle) != nullptr;
        case Kind::undefined:
            return false;
        case Kind::sequence:
            for (const auto& item : iterate(haystack)) {
                if (equals(item, needle)) return true;
            }
            return false;
        default:
            type_error("argument of type '" + haystack.type_name() + "' is not iterable");
    }
}

std::vector<std::string_view> split_code_points(std::string_view s) {
    std::vector<std::string_view> out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        n = std::min(n, s.size() - i);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

bool is_ascii(std::string_view s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<Value> iterate(const Value& v) {
    switch (v.kind()) {
        case Kind::undefined:
            return {};
        case Kind::sequence: {
            Sequence& s = v.seq_mut();
            if (s.flavor == SeqFlavor::generator) {
                if (s.consumed) return {};
                s.consumed = true;
            }
            return s.items;
        }
        case Kind::mapping: {
            std::vector<Value> keys;
            keys.reserve(v.map().items.size());
            for (const auto& kv : v.map().items) keys.push_back(kv.first);
            return keys;
        }
        case Kind::string: {
            std::vector<Value> chars;
            for (auto cp : split_code_points(v.str())) chars.emplace_back(std::string(cp));
            return chars;
        }
        default:
            type_error("'" + v.type_name() + "' object is not iterable");
    }
}

std::int64_t length(const Value& v) {
    switch (v.kind()) {
        case Kind::undefined:
            return 0;
        case Kind::string: {
            const std::string& s = v.str();
            std::int64_t n = 0;
            for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
            return n;
        }
        case Kind::sequence:
            if (v.is_generator()) type_error("object of type 'generator' has no len()");
            return static_cast<std::int64_t>(v.items().size());
        case Kind::mapping:
            return static_cast<std::int64_t>(v.map().items.size());
        default:
            type_error("object of type '" + v.type_name() + "' has no len()");
    }
}

}  // namespace brigade::model::text::jinja
