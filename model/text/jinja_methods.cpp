// Methods of Python values reachable from templates: `str.strip()`, `dict.items()`, ...
//
// transformers renders in jinja2's ImmutableSandboxedEnvironment, so the mutating methods of
// lists and dicts (`append`, `pop`, `update`, ...) are *refused*: reaching them gives an
// Undefined that raises SecurityError when called. Templates that rely on them fail under HF
// too (e.g. Kimi-K2-Thinking with tool calls), and we fail the same way.

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include "model/text/jinja_renderer.hpp"
#include "model/text/jinja_strings.hpp"

namespace brigade::model::text::jinja {

namespace {

constexpr std::array<std::string_view, 33> kStrMethods = {
    "startswith",   "endswith",     "split",    "rsplit",  "strip",      "lstrip",     "rstrip",
    "replace",      "upper",        "lower",    "title",   "capitalize", "format",     "join",
    "find",         "rfind",        "index",    "rindex",  "count",      "splitlines", "isdigit",
    "isalpha",      "isalnum",      "isspace",  "islower", "isupper",    "partition",  "rpartition",
    "removeprefix", "removesuffix", "swapcase", "zfill",   "isnumeric",
};
constexpr std::array<std::string_view, 5> kDictMethods = {"items", "keys", "values", "get", "copy"};
constexpr std::array<std::string_view, 5> kDictMutators = {"clear", "pop", "popitem", "setdefault",
                                                           "update"};
constexpr std::array<std::string_view, 3> kListMethods = {"index", "count", "copy"};
constexpr std::array<std::string_view, 8> kListMutators = {"append", "clear", "pop",    "reverse",
                                                           "insert", "sort",  "extend", "remove"};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

class BoundMethod : public Callable {
public:
    BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
    std::string name() const override { return self_.type_name() + "." + name_; }
    Value call(Renderer& r, CallArgs& args) const override {
        return call_method(r, self_, name_, args);
    }

private:
    Value self_;
    std::string name_;
};

const std::string& str_arg(const CallArgs& args, std::size_t i, std::string_view method) {
    if (i >= args.positional.size()) {
        type_error(std::string(method) + "() missing required argument");
    }
    const Value& v = args.positional[i];
    if (!v.is_string()) {
        if (v.is_undefined()) fail_undefined(v);
        type_error(std::string(method) + "() argument must be str, not " + v.type_name());
    }
    return v.str();
}

std::optional<std::string_view> opt_str_arg(const CallArgs& args, std::size_t i,
                                            std::string_view name) {
    const Value* v = args.get(i, name);
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_string()) type_error("must be str or None, not " + v->type_name());
    return std::string_view(v->str());
}

std::int64_t int_arg(const CallArgs& args, std::size_t i, std::string_view name,
                     std::int64_t fallback) {
    const Value* v = args.get(i, name);
    if (!v) return fallback;
    if (!v->is_int() && !v->is_bool())
        type_error("'" + v->type_name() + "' object cannot be interpreted as an integer");
    return v->is_bool() ? v->as_bool() : v->as_int();
}

Value string_list(std::vector<std::string> parts) {
    std::vector<Value> out;
    out.reserve(parts.size());
    for (auto& p : parts) out.emplace_back(std::move(p));
    return Value::list(std::move(out));
}

// `str.format` with `{}`, `{0}` and `{name}` fields (no format specs beyond the plain form).
std::string str_format(const std::string& fmt, const CallArgs& args) {
    std::string out;
    std::size_t auto_index = 0;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        char c = fmt[i];
        if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            auto close = fmt.find('}', i);
            if (close == std::string::npos)
                raise("ValueError", "expected '}' before end of string");
            std::string field = fmt.substr(i + 1, close - i - 1);
            auto colon = field.find(':');
            if (colon != std::string::npos) field = field.substr(0, colon);
            const Value* v = nullptr;
            if (field.empty()) {
                v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
                ++auto_index;
            } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
                auto idx = std::stoul(field);
                v = idx < args.positional.size() ? &args.positional[idx] : nullptr;
            } else {
                v = args.keyword_arg(field);
            }
            if (!v) raise("IndexError", "Replacement index out of range for positional args tuple");
            append_str(out, *v);
            i = close;
        } else if (c == '}') {
            raise("ValueError", "Single '}' encountered in format string");
        } else {
            out += c;
        }
    }
    return out;
}

bool all_code_points(const std::string& s, bool (*pred)(std::uint32_t)) {
    if (s.empty()) return false;
    for (auto cp : split_code_points(s)) {
        unsigned char c = static_cast<unsigned char>(cp[0]);
        if (cp.size() == 1 && !pred(c)) return false;
        if (cp.size() > 1 && !pred(0x80)) return false;  // non-ASCII: treated by the predicate
    }
    return true;
}

Value call_str_method(const Value& self, std::string_view name, CallArgs& args) {
    const std::string& s = self.str();
    if (name == "startswith" || name == "endswith") {
        const Value* arg = args.get(0, "prefix");
        if (!arg) type_error(std::string(name) + "() takes at least 1 argument (0 given)");
        std::vector<std::string> options;
        if (arg->is_string()) {
            options.push_back(arg->str());
        } else if (arg->is_sequence() && arg->seq().flavor == SeqFlavor::tuple) {
            for (const auto& v : arg->items()) {
                if (!v.is_string())
                    type_error("tuple for " + std::string(name) + " must only contain str");
                options.push_back(v.str());
            }
        } else {
            if (arg->is_undefined()) fail_undefined(*arg);
            type_error(std::string(name) + " first arg must be str or a tuple of str, not " +
                       arg->type_name());
        }
        for (const auto& o : options) {
            bool hit = name == "startswith" ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                                            : s.size() >= o.size() &&
                                                  s.compare(s.size() - o.size(), o.size(), o) == 0;
            if (hit) return Value(true);
        }
        return Value(false);
    }
    if (name == "split" || name == "rsplit") {
        auto sep = opt_str_arg(args, 0, "sep");
        auto maxsplit = int_arg(args, 1, "maxsplit", -1);
        return string_list(name == "split" ? py_split(s, sep, maxsplit)
                                           : py_rsplit(s, sep, maxsplit));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        auto chars = opt_str_arg(args, 0, "chars");
        return Value(std::string(py_strip(s, name != "rstrip", name != "lstrip", chars)));
    }
    if (name == "replace") {
        return Value(py_replace(s, str_arg(args, 0, name), str_arg(args, 1, name),
                                int_arg(args, 2, "count", -1)));
    }
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower") return Value(py_lower(s));
    if (name == "title") return Value(py_title(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    if (name == "swapcase") {
        std::string out;
        for (auto cp : split_code_points(s)) {
            std::string c(cp);
            std::string up = py_upper(c);
            out += up == c ? py_lower(c) : up;
        }
        return Value(std::move(out));
    }
    if (name == "format") return Value(str_format(s, args));
    if (name == "join") {
        if (args.positional.empty()) type_error("join() takes exactly one argument (0 given)");
        std::string out;
        bool first = true;
        for (const auto& item : iterate(args.positional[0])) {
            if (!item.is_string()) {
                type_error("sequence item: expected str instance, " + item.type_name() + " found");
            }
            if (!first) out += s;
            first = false;
            out += item.str();
        }
        return Value(std::move(out));
    }
    if (name == "find" || name == "index") {
        auto at = py_find(s, str_arg(args, 0, name));
        if (at < 0 && name == "index") raise("ValueError", "substring not found");
        return Value(at);
    }
    if (name == "rfind" || name == "rindex") {
        const std::string& needle = str_arg(args, 0, name);
        auto hit = s.rfind(needle);
        if (hit == std::string::npos) {
            if (name == "rindex") raise("ValueError", "substring not found");
            return Value(std::int64_t{-1});
        }
        std::int64_t cp_index = 0;
        for (std::size_t i = 0; i < hit; ++i)
            cp_index += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
        return Value(cp_index);
    }
    if (name == "count") return Value(py_count(s, str_arg(args, 0, name)));
    if (name == "splitlines") {
        const Value* keep = args.get(0, "keepends");
        std::vector<std::string> lines = py_splitlines(s, keep && keep->truthy());
        return string_list(std::move(lines));
    }
    if (name == "isdigit" || name == "isnumeric") {
        return Value(all_code_points(s, [](std::uint32_t c) { return c >= '0' && c <= '9'; }));
    }
    if (name == "isalpha") {
        return Value(all_code_points(s, [](std::uint32_t c) {
            return c >= 0x80 || std::isalpha(static_cast<int>(c)) != 0;
        }));
    }
    if (name == "isalnum") {
        return Value(all_code_points(s, [](std::uint32_t c) {
            return c >= 0x80 || std::isalnum(static_cast<int>(c)) != 0;
        }));
    }
    if (name == "isspace") return Value(!s.empty() && py_strip(s, true, true).empty());
    if (name == "islower") return Value(py_lower(s) == s && py_upper(s) != s);
    if (name == "isupper") return Value(py_upper(s) == s && py_lower(s) != s);
    if (name == "partition" || name == "rpartition") {
        const std::string& sep = str_arg(args, 0, name);
        if (sep.empty()) raise("ValueError", "empty separator");
        auto hit = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (hit == std::string::npos) {
            return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")})
                                       : Value::tuple({Value(""), Value(""), Value(s)});
        }
        return Value::tuple(
            {Value(s.substr(0, hit)), Value(sep), Value(s.substr(hit + sep.size()))});
    }
    if (name == "removeprefix") {
        const std::string& p = str_arg(args, 0, name);
        return Value(s.rfind(p, 0) == 0 ? s.substr(p.size()) : s);
    }
    if (name == "removesuffix") {
        const std::string& p = str_arg(args, 0, name);
        bool ends =
            !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
        return Value(ends ? s.substr(0, s.size() - p.size()) : s);
    }
    if (name == "zfill") {
        auto width = int_arg(args, 0, "width", 0);
        auto n = length(self);
        if (n >= width) return self;
        std::string pad(static_cast<std::size_t>(width - n), '0');
        if (!s.empty() && (s[0] == '-' || s[0] == '+'))
            return Value(s.substr(0, 1) + pad + s.substr(1));
        return Value(pad + s);
    }
    raise("AttributeError", "'str' object has no attribute '" + std::string(name) + "'");
}

Value call_dict_method(const Value& self, std::string_view name, CallArgs& args) {
    const Mapping& m = self.map();
    if (name == "items") {
        std::vector<Value> out;
        out.reserve(m.items.size());
        for (const auto& [k, v] : m.items) out.push_back(Value::tuple({k, v}));
        return Value::list(std::move(out));
    }
    if (name == "keys" || name == "values") {
        std::vector<Value> out;
        out.reserve(m.items.size());
        for (const auto& [k, v] : m.items) out.push_back(name == "keys" ? k : v);
        return Value::list(std::move(out));
    }
    if (name == "get") {
        if (args.positional.empty()) type_error("get expected at least 1 argument, got 0");
        if (const Value* v = m.find(args.positional[0])) return *v;
        return args.positional.size() > 1 ? args.positional[1] : Value::none();
    }
    if (name == "copy") return Value::dict(m);
    raise("AttributeError", "'dict' object has no attribute '" + std::string(name) + "'");
}

Value call_list_method(const Value& self, std::string_view name, CallArgs& args) {
    const auto& items = self.items();
    if (args.positional.empty() && name != "copy") {
        type_error(std::string(name) + "() takes exactly one argument (0 given)");
    }
    if (name == "index") {
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (equals(items[i], args.positional[0])) return Value(static_cast<std::int64_t>(i));
        }
        raise("ValueError", repr(args.positional[0]) + " is not in list");
    }
    if (name == "count") {
        std::int64_t n = 0;
        for (const auto& v : items) n += equals(v, args.positional[0]);
        return Value(n);
    }
    if (name == "copy") return Value::list(items, self.seq().flavor);
    raise("AttributeError", "'list' object has no attribute '" + std::string(name) + "'");
}

}  // namespace

MethodKind method_kind(const Value& v, std::string_view name) {
    switch (v.kind()) {
        case Kind::string:
            return in(kStrMethods, name) ? MethodKind::safe : MethodKind::none;
        case Kind::mapping:
            if (in(kDictMethods, name)) return MethodKind::safe;
            return in(kDictMutators, name) ? MethodKind::unsafe : MethodKind::none;
        case Kind::sequence:
            if (v.is_generator()) return MethodKind::none;
            if (in(kListMethods, name)) return MethodKind::safe;
            if (v.seq().flavor == SeqFlavor::list && in(kListMutators, name))
                return MethodKind::unsafe;
            return MethodKind::none;
        default:
            return MethodKind::none;
    }
}

Value make_bound_method(const Value& self, std::string_view name) {
    return Value::callable(std::make_shared<BoundMethod>(self, std::string(name)));
}

Value call_method(Renderer&, const Value& self, std::string_view name, CallArgs& args) {
    switch (self.kind()) {
        case Kind::string:
            return call_str_method(self, name, args);
        case Kind::mapping:
            return call_dict_method(self, name, args);
        case Kind::sequence:
            return call_list_method(self, name, args);
        default:
            raise("AttributeError",
                  "'" + self.type_name() + "' object has no attribute '" + std::string(name) + "'");
    }
}

}  // namespace brigade::model::text::jinja
