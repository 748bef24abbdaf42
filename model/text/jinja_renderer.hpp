#pragma once
// The tree-walking renderer (internal to the Jinja interpreter; callers use jinja.hpp).
//
// Scoping follows jinja2: `for` bodies, macro calls and `with` blocks get a fresh scope whose
// parent is the defining scope (so `set` inside a loop does not leak out, and macros see the
// variables of where they were defined, as they are when called); `if` does not create one.
// Errors are thrown as `TemplateException` inside the renderer and turned into `Result` at
// the public boundary (jinja.cpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/text/jinja_ast.hpp"
#include "model/text/jinja_value.hpp"

namespace brigade::model::text::jinja {

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;

    // Positional `index` or keyword `name`, whichever was given; nullptr if neither.
    const Value* get(std::size_t index, std::string_view name) const;
    const Value* keyword_arg(std::string_view name) const;
};

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

// Scopes are shared: child scopes point at their parent, and macros and recursive loops keep the
// scope they were defined in. Those hold it by raw pointer while the renderer pins the scope
// (`Renderer::pin`), so a macro stored in its own scope does not form a reference cycle.
struct Scope : std::enable_shared_from_this<Scope> {
    ScopePtr parent;
    std::vector<std::pair<std::string, Value>> vars;

    // The jinja2 frame this scope runs (null: a scope of our own that owns no names).
    const FrameRefs* frame = nullptr;

    explicit Scope(ScopePtr p = nullptr) : parent(std::move(p)) {}
    const Value* find(std::string_view name) const;
    void set(std::string_view name, Value value);
};

struct RenderLimits {
    std::size_t max_output_bytes = std::size_t{64} << 20;
    int max_call_depth = 100;              // nested macro calls / recursive loops
    std::uint64_t max_steps = 50'000'000;  // statements + loop iterations + calls
};

struct RenderConfig {
    RenderLimits limits;
    // `strftime_now(format)`; empty = the local time of this machine.
    std::function<std::string(std::string_view)> strftime_now;
};

class Renderer {
public:
    explicit Renderer(const RenderConfig& config) : config_(config) {}
    ~Renderer();
    Renderer(const Renderer&) = delete;
    Renderer& operator=(const Renderer&) = delete;

    void render(const Body& body, const ScopePtr& scope, std::string& out);

    Value eval(const Expr& e, const ScopePtr& scope);
    // Calls a macro, global, method or loop object.
    Value call(const Value& callee, CallArgs& args);
    Value call_macro(const MacroDef& def, const ScopePtr& closure, CallArgs& args,
                     const Value& caller);
    // Renders a recursive loop's body for `loop(items)`.
    std::string render_loop(const Stmt& stmt, const Value& iterable, const ScopePtr& scope,
                            int depth);

    Value apply_filter(std::string_view name, const Value& subject, CallArgs& args);
    bool apply_test(std::string_view name, const Value& subject, CallArgs& args);

    Value get_attr(const Value& subject, std::string_view name);
    Value get_item(const Value& subject, const Value& key);

    const RenderConfig& config() const { return config_; }
    // Keeps `scope` alive until the render ends.
    void pin(const ScopePtr& scope);
    // Namespaces are the only mutable values, so the only way to build a reference cycle
    // (`set ns.self = ns`); the renderer empties them when it ends.
    void track(const ObjectPtr& ns) { namespaces_.push_back(ns); }
    void tick();
    void check_output_size(std::size_t n) const;

private:
    enum class Flow { normal, break_loop, continue_loop };

    Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
    Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out);
    void exec_for(const Stmt& s, const Value& iterable, const ScopePtr& scope, std::string& out,
                  int depth);
    void assign(const Target& target, const Value& value, const ScopePtr& scope);
    std::string capture(const Body& body, const ScopePtr& scope);

    Value eval_binary(const Expr& e, const ScopePtr& scope);
    Value eval_compare(const Expr& e, const ScopePtr& scope);
    Value eval_call(const Expr& e, const ScopePtr& scope);
    Value eval_slice(const Expr& e, const ScopePtr& scope);
    CallArgs eval_args(const Expr& e, const ScopePtr& scope, std::size_t first);
    Value lookup(std::string_view name, const ScopePtr& scope);

    const RenderConfig& config_;
    std::uint64_t steps_ = 0;
    int call_depth_ = 0;
    std::vector<ScopePtr> pinned_;
    std::vector<ObjectPtr> namespaces_;
};

// ---- pieces implemented in the other jinja_*.cpp files -------------------------------------

// Arithmetic with Python semantics (`+ - * / // % **`), raising TypeError/ZeroDivisionError.
Value binary_op(std::string_view op, const Value& a, const Value& b, std::size_t max_bytes);
Value negate(const Value& v);
// Python `%`-formatting of a string (`"%s: %d" % (a, b)`).
std::string percent_format(const std::string& format, const Value& args);

// Python `seq[start:stop:step]` on lists, tuples and strings (null = omitted).
Value slice_value(const Value& subject, const Value* start, const Value* stop, const Value* step);

// Methods of str, dict and list values reached by attribute (`s.strip()`, `d.items()`).
// `method_kind` says whether `name` is a method of `v` (and whether the sandbox allows it).
enum class MethodKind { none, safe, unsafe };
MethodKind method_kind(const Value& v, std::string_view name);
Value make_bound_method(const Value& self, std::string_view name);
Value call_method(Renderer& r, const Value& self, std::string_view name, CallArgs& args);

// Globals: range, namespace, dict, cycler, joiner, raise_exception, strftime_now.
const Value* find_global(std::string_view name);

// The loop object of `for` (`loop.index`, `loop.cycle`, `loop(children)` when recursive).
ObjectPtr make_loop_object(const Stmt* stmt, Scope* scope,
                           std::shared_ptr<const std::vector<Value>> items, std::size_t index0,
                           int depth, std::shared_ptr<Value> last_changed);
// A macro bound to the scope it was defined in.
Value make_macro(std::shared_ptr<const MacroDef> def, Scope* closure, Value caller);

}  // namespace brigade::model::text::jinja
