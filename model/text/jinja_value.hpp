#pragma once
// Values of the Jinja interpreter, with Python semantics.
//
// Chat templates are Python code in disguise: `{{ x }}` prints `str(x)`, `==` compares like
// Python, `[1:]` slices by code point, `tojson` is `json.dumps`. A `Value` models the handful
// of Python types that reach a template (None, bool, int, float, str, list, tuple, dict) plus
// jinja2's own: `Undefined` (a missing variable or key; empty and falsy, an error when used
// in arithmetic or called), generators (what `map`/`select` return: always truthy, no
// length, one pass), namespaces and loop objects, and callables (macros, globals, methods).
//
// Containers are shared, immutable once built: transformers renders in an
// `ImmutableSandboxedEnvironment`, where `list.append`/`dict.update` raise `SecurityError`, so
// only namespaces (`set ns.x = ...`) ever change after creation.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace brigade::model::text::jinja {

class Value;
class Renderer;
struct CallArgs;

// An error raised while parsing or rendering; `line` is 1-based (0 = not yet known, the
// statement or expression that catches it fills it in). `kind` is the Python exception name
// ("TemplateSyntaxError", "UndefinedError", "TypeError", ...), kept for messages.
struct TemplateException {
    std::string kind;
    std::string message;
    int line = 0;
};

[[noreturn]] void raise(std::string kind, std::string message);
[[noreturn]] inline void type_error(std::string message) { raise("TypeError", std::move(message)); }

using StringPtr = std::shared_ptr<const std::string>;

// jinja2's default `Undefined`: `hint` is the message raised when it is used in a way that
// needs a value (`'x' is undefined`, `'dict object' has no attribute 'y'`). `unsafe` marks the
// sandbox's refusal of a mutating method, raised as a `SecurityError` when called.
struct Undefined {
    StringPtr hint;
    bool unsafe = false;
};
struct NoneType {};

enum class SeqFlavor : std::uint8_t { list, tuple, generator };

struct Sequence {
    std::vector<Value> items;
    SeqFlavor flavor = SeqFlavor::list;
    bool consumed = false;  // generators iterate once
    int depth = 1;          // nesting depth of containers (see kMaxValueDepth)
};

// A Python dict: insertion-ordered, keys of any hashable value (in practice strings).
struct Mapping {
    std::vector<std::pair<Value, Value>> items;
    int depth = 1;  // set by Value::dict
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(Value key, Value value);
};

// Objects with attributes: namespaces, loop contexts, cyclers, joiners.
class Object : public std::enable_shared_from_this<Object> {
public:
    virtual ~Object() = default;
    virtual std::string_view type_name() const = 0;
    // The attribute, or an Undefined.
    virtual Value get_attr(std::string_view name) const;
    // Only namespaces accept assignment.
    virtual bool set_attr(std::string_view name, Value value);
    virtual std::string repr() const;
    virtual bool callable() const { return false; }
    virtual Value call(Renderer& renderer, CallArgs& args) const;
    // Drops held values (breaks reference cycles at the end of a render).
    virtual void release() {}
    // Container nesting below this object (namespaces hold values).
    virtual int depth() const { return 1; }
};

// Macros, globals and bound methods.
class Callable {
public:
    virtual ~Callable() = default;
    virtual std::string name() const = 0;
    virtual Value call(Renderer& renderer, CallArgs& args) const = 0;
};

using SequencePtr = std::shared_ptr<Sequence>;
using MappingPtr = std::shared_ptr<Mapping>;
using ObjectPtr = std::shared_ptr<Object>;
using CallablePtr = std::shared_ptr<const Callable>;

enum class Kind : std::uint8_t {
    undefined,
    none,
    boolean,
    integer,
    floating,
    string,
    sequence,
    mapping,
    object,
    callable,
};

class Value {
public:
    Value() = default;  // Undefined without a hint
    static Value undefined(std::string hint, bool unsafe = false);
    static Value none() { return Value(NoneType{}); }
    Value(bool b) : v_(b) {}
    Value(int i) : v_(static_cast<std::int64_t>(i)) {}
    Value(std::int64_t i) : v_(i) {}
    Value(double d) : v_(d) {}
    Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
    Value(const char* s) : Value(std::string(s)) {}
    Value(StringPtr s) : v_(std::move(s)) {}
    static Value list(std::vector<Value> items, SeqFlavor flavor = SeqFlavor::list);
    static Value tuple(std::vector<Value> items) {
        return list(std::move(items), SeqFlavor::tuple);
    }
    static Value dict(Mapping m);
    static Value object(ObjectPtr o);
    static Value callable(CallablePtr f);
    // Raises (TemplateException) for JSON nested deeper than kMaxValueDepth.
    static Value from_json(const nlohmann::ordered_json& j, int depth = 0);
    // A `Markup` string (from `|safe`, `|escape`): adding a plain string to it HTML-escapes the
    // plain one, as markupsafe does.
    static Value markup(std::string s) {
        Value v(std::move(s));
        v.markup_ = true;
        return v;
    }
    bool is_markup() const { return markup_ && is_string(); }

    Kind kind() const { return static_cast<Kind>(v_.index()); }
    bool is_undefined() const { return kind() == Kind::undefined; }
    bool is_none() const { return kind() == Kind::none; }
    bool is_bool() const { return kind() == Kind::boolean; }
    bool is_int() const { return kind() == Kind::integer; }
    bool is_float() const { return kind() == Kind::floating; }
    bool is_number() const { return is_int() || is_float() || is_bool(); }
    bool is_string() const { return kind() == Kind::string; }
    bool is_sequence() const { return kind() == Kind::sequence; }
    bool is_list_like() const;  // list or tuple (indexable, has a length)
    bool is_generator() const;
    bool is_mapping() const { return kind() == Kind::mapping; }
    bool is_object() const { return kind() == Kind::object; }
    bool is_callable() const;

    bool as_bool() const { return std::get<bool>(v_); }
    std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
    double as_float() const { return std::get<double>(v_); }
    // Numeric value of a bool/int/float, as Python would coerce it.
    double to_double() const;
    const std::string& str() const { return *std::get<StringPtr>(v_); }
    const StringPtr& str_ptr() const { return std::get<StringPtr>(v_); }
    const Sequence& seq() const { return *std::get<SequencePtr>(v_); }
    Sequence& seq_mut() const { return *std::get<SequencePtr>(v_); }
    const std::vector<Value>& items() const { return seq().items; }
    const Mapping& map() const { return *std::get<MappingPtr>(v_); }
    const ObjectPtr& obj() const { return std::get<ObjectPtr>(v_); }
    const CallablePtr& fn() const { return std::get<CallablePtr>(v_); }
    const Undefined& undef() const { return std::get<Undefined>(v_); }

    // Python truthiness (generators and objects are always true).
    bool truthy() const;
    // Python `type(x).__name__`, for error messages.
    std::string type_name() const;

private:
    template <class T>
    explicit Value(T v) : v_(std::move(v)) {}
    std::variant<Undefined, NoneType, bool, std::int64_t, double, StringPtr, SequencePtr,
                 MappingPtr, ObjectPtr, CallablePtr>
        v_;
    bool markup_ = false;
};

// HTML escaping as markupsafe does it (& < > " ').
std::string html_escape(std::string_view s);

// Values nest at most this deep (JSON input and values built by templates alike): deeper
// structures would make printing, comparing and freeing them recurse without bound.
inline constexpr int kMaxValueDepth = 400;
int nesting_depth(const Value& v);

// Raises the UndefinedError (or SecurityError) an undefined value carries.
[[noreturn]] void fail_undefined(const Value& v);

// Python `str(v)`: what `{{ v }}` prints (Undefined prints nothing).
std::string to_str(const Value& v);
void append_str(std::string& out, const Value& v);
// Python `repr(v)`.
std::string repr(const Value& v);
// Python's `repr(float)`: shortest round-trip digits, `1.0`, `1e-05`, `1e+16`, `inf`, `nan`.
std::string float_repr(double d);

// Python `==` (1 == 1.0 == True; list vs tuple differ; dicts ignore order).
bool equals(const Value& a, const Value& b);
// Python `<`; raises TypeError for unorderable types.
bool less_than(const Value& a, const Value& b);
// `needle in haystack` (substring, list membership, dict key).
bool contains(const Value& haystack, const Value& needle);
// Materialise an iterable: list/tuple items, dict keys, string characters, a generator's items
// (consuming it). Undefined iterates as empty; anything else raises TypeError.
std::vector<Value> iterate(const Value& v);
// Python `len(v)`; raises TypeError for values without a length.
std::int64_t length(const Value& v);

// Code-point view of UTF-8 text (Python indexes strings by code point).
std::vector<std::string_view> split_code_points(std::string_view s);
bool is_ascii(std::string_view s);

// Python `json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...)`.
struct JsonStyle {
    bool pretty = false;  // indent given (not None)
    std::string indent;   // per level, when pretty
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string to_json(const Value& v, const JsonStyle& style);
// The reverse, for the `from_json` filter and for data given to the renderer.
nlohmann::ordered_json to_ordered_json(const Value& v);

}  // namespace brigade::model::text::jinja
