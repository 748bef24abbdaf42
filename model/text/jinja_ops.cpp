// Python arithmetic, `%`-formatting and slicing for the Jinja interpreter.

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "model/text/jinja_renderer.hpp"

namespace brigade::model::text::jinja {

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (op == "+" && a.is_string()) {
        type_error("can only concatenate str (not \"" + b.type_name() + "\") to str");
    }
    if (op == "+" && a.is_list_like()) {
        type_error("can only concatenate " + a.type_name() + " (not \"" + b.type_name() +
                   "\") to " + a.type_name());
    }
    type_error("unsupported operand type(s) for " + std::string(op) + ": '" + a.type_name() +
               "' and '" + b.type_name() + "'");
}

std::int64_t int_of(const Value& v) { return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int(); }

[[noreturn]] void overflow() { raise("OverflowError", "integer result too large"); }

Value int_pow(std::int64_t base, std::int64_t exp) {
    if (exp < 0) return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
    std::int64_t result = 1;
    while (exp > 0) {
        if (exp & 1) {
            if (__builtin_mul_overflow(result, base, &result)) overflow();
        }
        exp >>= 1;
        if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
    }
    return Value(result);
}

Value repeat(const Value& seq, std::int64_t n, std::size_t max_bytes) {
    if (n < 0) n = 0;
    if (seq.is_string()) {
        const std::string& s = seq.str();
        if (!s.empty() && static_cast<std::uint64_t>(n) > max_bytes / s.size()) {
            raise("MemoryError", "string repetition result too large");
        }
        std::string out;
        out.reserve(s.size() * static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) out += s;
        return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
    }
    const auto& items = seq.items();
    if (!items.empty() && static_cast<std::uint64_t>(n) > (max_bytes / 16) / items.size()) {
        raise("MemoryError", "list repetition result too large");
    }
    std::vector<Value> out;
    for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
    return Value::list(std::move(out), seq.seq().flavor);
}

}  // namespace

Value negate(const Value& v) {
    if (v.is_undefined()) fail_undefined(v);
    if (v.is_float()) return Value(-v.as_float());
    if (v.is_int() || v.is_bool()) {
        std::int64_t i = int_of(v);
        if (i == std::numeric_limits<std::int64_t>::min()) overflow();
        return Value(-i);
    }
    type_error("bad operand type for unary -: '" + v.type_name() + "'");
}

Value binary_op(std::string_view op, const Value& a, const Value& b, std::size_t max_bytes) {
    if (a.is_number() && b.is_number()) {
        bool floating = a.is_float() || b.is_float();
        if (op == "/") {
            double d = b.to_double();
            if (d == 0.0) raise("ZeroDivisionError", "division by zero");
            return Value(a.to_double() / d);
        }
        if (floating) {
            double x = a.to_double();
            double y = b.to_double();
            if (op == "+") return Value(x + y);
            if (op == "-") return Value(x - y);
            if (op == "*") return Value(x * y);
            if (op == "**") return Value(std::pow(x, y));
            if (y == 0.0) raise("ZeroDivisionError", "float division by zero");
            if (op == "//") return Value(std::floor(x / y));
            if (op == "%") {
                double r = std::fmod(x, y);
                if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
                return Value(r);
            }
        } else {
            std::int64_t x = int_of(a);
            std::int64_t y = int_of(b);
            std::int64_t r = 0;
            if (op == "+") {
                if (__builtin_add_overflow(x, y, &r)) overflow();
                return Value(r);
            }
            if (op == "-") {
                if (__builtin_sub_overflow(x, y, &r)) overflow();
                return Value(r);
            }
            if (op == "*") {
                if (__builtin_mul_overflow(x, y, &r)) overflow();
                return Value(r);
            }
            if (op == "**") return int_pow(x, y);
            if (y == 0) raise("ZeroDivisionError", "integer division or modulo by zero");
            if (x == std::numeric_limits<std::int64_t>::min() && y == -1) overflow();
            std::int64_t q = x / y;
            std::int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors towards -infinity
                q -= 1;
                m += y;
            }
            if (op == "//") return Value(q);
            if (op == "%") return Value(m);
        }
    }
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            if (a.str().size() + b.str().size() > max_bytes)
                raise("MemoryError", "string too large");
            if (a.is_markup() || b.is_markup()) {
                std::string left = a.is_markup() ? a.str() : html_escape(a.str());
                std::string right = b.is_markup() ? b.str() : html_escape(b.str());
                return Value::markup(left + right);
            }
            return Value(a.str() + b.str());
        }
        if (a.is_list_like() && b.is_list_like() && a.seq().flavor == b.seq().flavor) {
            std::vector<Value> items = a.items();
            items.insert(items.end(), b.items().begin(), b.items().end());
            return Value::list(std::move(items), a.seq().flavor);
        }
    }
    if (op == "*") {
        if ((a.is_string() || a.is_list_like()) && (b.is_int() || b.is_bool())) {
            return repeat(a, int_of(b), max_bytes);
        }
        if ((b.is_string() || b.is_list_like()) && (a.is_int() || a.is_bool())) {
            return repeat(b, int_of(a), max_bytes);
        }
    }
    if (op == "%" && a.is_string()) {
        if (b.is_undefined()) fail_undefined(b);
        return Value(percent_format(a.str(), b));
    }
    unsupported(op, a, b);
}

std::string percent_format(const std::string& format, const Value& args) {
    std::vector<Value> values;
    const Mapping* named = nullptr;
    if (args.is_sequence() && args.seq().flavor == SeqFlavor::tuple) {
        values = args.items();
    } else if (args.is_mapping()) {
        named = &args.map();
    } else {
        values.push_back(args);
    }
    std::size_t next = 0;
    std::string out;
    for (std::size_t i = 0; i < format.size(); ++i) {
        char c = format[i];
        if (c != '%') {
            out += c;
            continue;
        }
        if (++i >= format.size()) raise("ValueError", "incomplete format");
        const Value* value = nullptr;
        if (format[i] == '(' && named) {
            auto close = format.find(')', i);
            if (close == std::string::npos) raise("ValueError", "incomplete format key");
            value = named->find(std::string_view(format).substr(i + 1, close - i - 1));
            if (!value) raise("KeyError", format.substr(i + 1, close - i - 1));
            i = close + 1;
        }
        std::string spec;
        while (i < format.size() &&
               std::string_view("-+ #0123456789.").find(format[i]) != std::string_view::npos) {
            spec += format[i++];
        }
        if (i >= format.size()) raise("ValueError", "incomplete format");
        char conv = format[i];
        if (conv == '%') {
            out += '%';
            continue;
        }
        if (!value) {
            if (named && !args.is_mapping()) raise("TypeError", "format requires a mapping");
            if (next >= values.size()) type_error("not enough arguments for format string");
            value = &values[next++];
        }
        char buf[512];
        std::string fmt = "%" + spec;
        if (spec.size() > 20) raise("ValueError", "format specification too long");
        switch (conv) {
            case 's':
            case 'r':
            case 'a': {
                // Width and precision on strings are rare in templates: plain form only.
                out += conv == 's' ? to_str(*value) : repr(*value);
                break;
            }
            case 'd':
            case 'i':
            case 'x':
            case 'X':
            case 'o': {
                if (!value->is_number())
                    type_error(std::string(1, '%')
                                   .append(1, conv)
                                   .append(" format: a real number is required, not ")
                                   .append(value->type_name()));
                long long n = value->is_float()
                                  ? static_cast<long long>(value->as_float())
                                  : static_cast<long long>(value->is_bool() ? value->as_bool()
                                                                            : value->as_int());
                std::snprintf(buf, sizeof buf, (fmt + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
                              n);
                out += buf;
                break;
            }
            case 'f':
            case 'F':
            case 'e':
            case 'E':
            case 'g':
            case 'G':
                if (!value->is_number())
                    type_error("must be real number, not " + value->type_name());
                std::snprintf(buf, sizeof buf, (fmt + conv).c_str(), value->to_double());
                out += buf;
                break;
            default:
                raise("ValueError", std::string("unsupported format character '") + conv + "'");
        }
    }
    if (!named && next < values.size())
        type_error("not all arguments converted during string formatting");
    return out;
}

Value slice_value(const Value& subject, const Value* start, const Value* stop, const Value* step) {
    auto as_index = [](const Value* v) -> std::optional<std::int64_t> {
        if (!v || v->is_none()) return std::nullopt;
        if (v->is_undefined()) fail_undefined(*v);
        if (!v->is_int() && !v->is_bool()) {
            type_error("slice indices must be integers or None or have an __index__ method");
        }
        return v->is_bool() ? std::int64_t{v->as_bool()} : v->as_int();
    };
    std::int64_t st = as_index(step).value_or(1);
    if (st == 0) raise("ValueError", "slice step cannot be zero");
    std::vector<std::string_view> cps;
    bool ascii = subject.is_string() && is_ascii(subject.str());
    if (subject.is_string() && !ascii) cps = split_code_points(subject.str());
    std::int64_t n = subject.is_string() ? (ascii ? static_cast<std::int64_t>(subject.str().size())
                                                  : static_cast<std::int64_t>(cps.size()))
                                         : static_cast<std::int64_t>(subject.items().size());
    // CPython's PySlice_AdjustIndices.
    auto adjust = [&](std::optional<std::int64_t> v, bool is_start) {
        if (!v)
            return st > 0 ? (is_start ? std::int64_t{0} : n)
                          : (is_start ? n - 1 : std::int64_t{-1});
        std::int64_t i = *v;
        if (i < 0) {
            i += n;
            if (i < 0) i = st < 0 ? -1 : 0;
        } else if (i >= n) {
            i = st < 0 ? n - 1 : n;
        }
        return i;
    };
    std::int64_t lo = adjust(as_index(start), true);
    std::int64_t hi = adjust(as_index(stop), false);
    std::vector<std::int64_t> picks;
    if (st > 0) {
        for (std::int64_t i = lo; i < hi; i += st) picks.push_back(i);
    } else {
        for (std::int64_t i = lo; i > hi; i += st) picks.push_back(i);
    }
    if (subject.is_string()) {
        const std::string& s = subject.str();
        if (ascii && st == 1) {
            return Value(
                lo < hi ? s.substr(static_cast<std::size_t>(lo), static_cast<std::size_t>(hi - lo))
                        : std::string());
        }
        std::string out;
        for (auto i : picks) {
            if (ascii) {
                out += s[static_cast<std::size_t>(i)];
            } else {
                out += cps[static_cast<std::size_t>(i)];
            }
        }
        return Value(std::move(out));
    }
    std::vector<Value> out;
    out.reserve(picks.size());
    for (auto i : picks) out.push_back(subject.items()[static_cast<std::size_t>(i)]);
    return Value::list(std::move(out), subject.seq().flavor);
}

}  // namespace brigade::model::text::jinja
