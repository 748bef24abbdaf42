// Jinja tests (`x is defined`, `x is string`, `x is false`, ...), with jinja2's semantics:
// `true`/`false` are identity tests against the booleans (`1 is true` is false), `number`
// includes booleans, `integer` does not, and an Undefined is iterable and a sequence.

#include <array>

#include "model/text/jinja_builtins.hpp"
#include "model/text/jinja_parser.hpp"
#include "model/text/jinja_strings.hpp"

namespace brigade::model::text::jinja {

namespace {

const Value& other(const CallArgs& args, std::string_view test) {
    if (args.positional.empty()) type_error(std::string(test) + " test requires an argument");
    return args.positional[0];
}

bool t_defined(Renderer&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Renderer&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Renderer&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Renderer&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Renderer&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Renderer&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Renderer&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Renderer&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Renderer&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Renderer&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Renderer&, const Value& v, CallArgs&) { return v.is_mapping(); }
bool t_iterable(Renderer&, const Value& v, CallArgs&) {
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
}
bool t_sequence(Renderer&, const Value& v, CallArgs&) {
    return v.is_undefined() || v.is_string() || v.is_list_like() || v.is_mapping();
}
bool t_callable(Renderer&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_escaped(Renderer&, const Value&, CallArgs&) { return false; }

std::int64_t int_for(const Value& v, std::string_view test) {
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool();
    if (v.is_undefined()) fail_undefined(v);
    type_error(std::string(test) + " test needs an integer, not " + v.type_name());
}

bool t_odd(Renderer&, const Value& v, CallArgs&) { return int_for(v, "odd") % 2 != 0; }
bool t_even(Renderer&, const Value& v, CallArgs&) { return int_for(v, "even") % 2 == 0; }
bool t_divisibleby(Renderer&, const Value& v, CallArgs& args) {
    std::int64_t d = int_for(other(args, "divisibleby"), "divisibleby");
    if (d == 0) raise("ZeroDivisionError", "integer division or modulo by zero");
    std::int64_t x = int_for(v, "divisibleby");
    return x % d == 0;
}

bool t_lower(Renderer&, const Value& v, CallArgs&) {
    std::string s = to_str(v);
    return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Renderer&, const Value& v, CallArgs&) {
    std::string s = to_str(v);
    return py_upper(s) == s && py_lower(s) != s;
}

// `is sameas`: Python identity. Singletons (None, True, False) compare by value, containers by
// address; small ints and interned strings are an implementation detail we approximate by value.
bool t_sameas(Renderer&, const Value& v, CallArgs& args) {
    const Value& o = other(args, "sameas");
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
        case Kind::sequence:
            return &v.seq() == &o.seq();
        case Kind::mapping:
            return &v.map() == &o.map();
        default:
            return equals(v, o);
    }
}

bool t_eq(Renderer&, const Value& v, CallArgs& args) { return equals(v, other(args, "eq")); }
bool t_ne(Renderer&, const Value& v, CallArgs& args) { return !equals(v, other(args, "ne")); }
bool t_lt(Renderer&, const Value& v, CallArgs& args) { return less_than(v, other(args, "lt")); }
bool t_gt(Renderer&, const Value& v, CallArgs& args) { return less_than(other(args, "gt"), v); }
bool t_le(Renderer&, const Value& v, CallArgs& args) {
    const Value& o = other(args, "le");
    return !less_than(o, v);
}
bool t_ge(Renderer&, const Value& v, CallArgs& args) {
    const Value& o = other(args, "ge");
    return !less_than(v, o);
}
bool t_in(Renderer&, const Value& v, CallArgs& args) { return contains(other(args, "in"), v); }
bool t_filter(Renderer&, const Value& v, CallArgs&) {
    return v.is_string() && is_known_filter(v.str());
}
bool t_test(Renderer&, const Value& v, CallArgs&) {
    return v.is_string() && is_known_test(v.str());
}

constexpr auto kTests = std::to_array<TestEntry>({
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"filter", t_filter},
    {"test", t_test},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"lower", t_lower},
    {"upper", t_upper},
    {"string", t_string},
    {"mapping", t_mapping},
    {"number", t_number},
    {"sequence", t_sequence},
    {"iterable", t_iterable},
    {"callable", t_callable},
    {"sameas", t_sameas},
    {"escaped", t_escaped},
    {"in", t_in},
    {"==", t_eq},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"!=", t_ne},
    {"ne", t_ne},
    {">", t_gt},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">=", t_ge},
    {"ge", t_ge},
    {"<", t_lt},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<=", t_le},
    {"le", t_le},
});

}  // namespace

const TestFn* find_test(std::string_view name) {
    for (const auto& t : kTests) {
        if (t.name == name) return &t.fn;
    }
    return nullptr;
}

}  // namespace brigade::model::text::jinja
