// Global functions (range, namespace, dict, cycler, joiner, and transformers' raise_exception
// and strftime_now), macros as callables, and the `loop` object.

#include <algorithm>
#include <ctime>

#include "model/text/jinja_renderer.hpp"

namespace brigade::model::text::jinja {

namespace {

// jinja2's sandbox refuses ranges longer than this (sandbox.MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

class Namespace : public Object {
public:
    std::string_view type_name() const override { return "Namespace"; }
    Value get_attr(std::string_view name) const override {
        if (const Value* v = attrs_.find(name)) return *v;
        return Object::get_attr(name);
    }
    bool set_attr(std::string_view name, Value value) override {
        int d = nesting_depth(value) + 1;
        if (d > kMaxValueDepth) raise("RecursionError", "value nesting too deep");
        depth_ = std::max(depth_, d);
        attrs_.set(Value(std::string(name)), std::move(value));
        return true;
    }
    int depth() const override { return depth_; }
    std::string repr() const override {
        return "<Namespace " + jinja::repr(Value::dict(attrs_)) + ">";
    }
    void release() override { attrs_.items.clear(); }

    Mapping attrs_;
    int depth_ = 1;
};

class Cycler : public Object {
public:
    explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
    std::string_view type_name() const override { return "Cycler"; }
    Value get_attr(std::string_view name) const override;
    Value next() const {
        Value v = items_[pos_];
        pos_ = (pos_ + 1) % items_.size();
        return v;
    }
    void reset() const { pos_ = 0; }
    Value current() const { return items_[pos_]; }

private:
    std::vector<Value> items_;
    mutable std::size_t pos_ = 0;  // cyclers are stateful by design
};

class Joiner : public Object {
public:
    explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
    std::string_view type_name() const override { return "Joiner"; }
    bool callable() const override { return true; }
    Value call(Renderer&, CallArgs&) const override {
        if (!used_) {
            used_ = true;
            return Value("");
        }
        return Value(sep_);
    }

private:
    std::string sep_;
    mutable bool used_ = false;
};

// A global implemented by a plain function.
class Builtin : public Callable {
public:
    using Fn = Value (*)(Renderer&, CallArgs&);
    Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
    std::string name() const override { return name_; }
    Value call(Renderer& r, CallArgs& args) const override { return fn_(r, args); }

private:
    std::string name_;
    Fn fn_;
};

// A method bound to an object (`loop.cycle`, `cycler.next`).
template <class F>
class Lambda : public Callable {
public:
    Lambda(std::string name, F fn) : name_(std::move(name)), fn_(std::move(fn)) {}
    std::string name() const override { return name_; }
    Value call(Renderer& r, CallArgs& args) const override { return fn_(r, args); }

private:
    std::string name_;
    F fn_;
};

template <class F>
Value lambda(std::string name, F fn) {
    return Value::callable(std::make_shared<Lambda<F>>(std::move(name), std::move(fn)));
}

Value Cycler::get_attr(std::string_view name) const {
    if (name == "current") return current();
    auto self = std::static_pointer_cast<const Cycler>(shared_from_this());
    if (name == "next")
        return lambda("next", [self](Renderer&, CallArgs&) { return self->next(); });
    if (name == "reset") {
        return lambda("reset", [self](Renderer&, CallArgs&) {
            self->reset();
            return Value::none();
        });
    }
    return Object::get_attr(name);
}

std::int64_t int_param(const Value& v) {
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool();
    if (v.is_undefined()) fail_undefined(v);
    type_error(std::string("'")
                   .append(v.type_name())
                   .append("' object cannot be interpreted as an integer"));
}

Value g_range(Renderer& r, CallArgs& args) {
    const auto& p = args.positional;
    if (p.empty() || p.size() > 3) type_error("range expected 1 to 3 arguments");
    std::int64_t start = 0, stop = 0, step = 1;
    if (p.size() == 1) {
        stop = int_param(p[0]);
    } else {
        start = int_param(p[0]);
        stop = int_param(p[1]);
        if (p.size() == 3) step = int_param(p[2]);
    }
    if (step == 0) raise("ValueError", "range() arg 3 must not be zero");
    std::vector<Value> out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<std::int64_t>(out.size()) >= kMaxRange) {
            raise("OverflowError",
                  "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        }
        out.emplace_back(i);
        r.tick();
    }
    return Value::list(std::move(out));
}

Value g_namespace(Renderer& r, CallArgs& args) {
    auto ns = std::make_shared<Namespace>();
    for (const auto& a : args.positional) {
        if (!a.is_mapping()) type_error("namespace() positional arguments must be mappings");
        for (const auto& [k, v] : a.map().items) ns->set_attr(to_str(k), v);
    }
    for (const auto& [k, v] : args.keyword) ns->set_attr(k, v);
    r.track(ns);
    return Value::object(ns);
}

Value g_dict(Renderer&, CallArgs& args) {
    Mapping m;
    for (const auto& a : args.positional) {
        if (a.is_mapping()) {
            for (const auto& [k, v] : a.map().items) m.set(k, v);
        } else {
            for (const auto& pair : iterate(a)) {
                auto kv = iterate(pair);
                if (kv.size() != 2)
                    raise("ValueError", "dictionary update sequence element has wrong length");
                m.set(kv[0], kv[1]);
            }
        }
    }
    for (const auto& [k, v] : args.keyword) m.set(Value(k), v);
    return Value::dict(std::move(m));
}

Value g_cycler(Renderer&, CallArgs& args) {
    if (args.positional.empty()) type_error("at least one item has to be provided");
    return Value::object(std::make_shared<Cycler>(args.positional));
}

Value g_joiner(Renderer&, CallArgs& args) {
    const Value* sep = args.get(0, "sep");
    return Value::object(std::make_shared<Joiner>(sep ? to_str(*sep) : ", "));
}

Value g_raise_exception(Renderer&, CallArgs& args) {
    raise("TemplateError", args.positional.empty() ? "" : to_str(args.positional[0]));
}

Value g_strftime_now(Renderer& r, CallArgs& args) {
    std::string format = args.positional.empty() ? "" : to_str(args.positional[0]);
    if (r.config().strftime_now) return Value(r.config().strftime_now(format));
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    std::size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
    return Value(std::string(buf, n));
}

class Macro : public Callable {
public:
    Macro(std::shared_ptr<const MacroDef> def, Scope* closure, Value caller)
        : def_(std::move(def)), closure_(closure), caller_(std::move(caller)) {}
    std::string name() const override { return def_->name; }
    Value call(Renderer& r, CallArgs& args) const override {
        return r.call_macro(*def_, closure_->shared_from_this(), args, caller_);
    }

private:
    std::shared_ptr<const MacroDef> def_;
    Scope* closure_;  // pinned by the renderer
    Value caller_;
};

class Loop : public Object {
public:
    Loop(const Stmt* stmt, Scope* scope, std::shared_ptr<const std::vector<Value>> items,
         std::size_t index0, int depth, std::shared_ptr<Value> last_changed)
        : stmt_(stmt),
          scope_(scope),
          items_(std::move(items)),
          index0_(index0),
          depth_(depth),
          last_changed_(std::move(last_changed)) {}

    std::string_view type_name() const override { return "LoopContext"; }
    bool callable() const override { return true; }

    Value get_attr(std::string_view name) const override {
        auto n = static_cast<std::int64_t>(items_->size());
        auto i = static_cast<std::int64_t>(index0_);
        if (name == "index") return Value(i + 1);
        if (name == "index0") return Value(i);
        if (name == "revindex") return Value(n - i);
        if (name == "revindex0") return Value(n - i - 1);
        if (name == "first") return Value(i == 0);
        if (name == "last") return Value(i == n - 1);
        if (name == "length") return Value(n);
        if (name == "depth") return Value(std::int64_t{depth_} + 1);
        if (name == "depth0") return Value(std::int64_t{depth_});
        if (name == "previtem") {
            return i > 0 ? (*items_)[index0_ - 1] : Value::undefined("there is no previous item");
        }
        if (name == "nextitem") {
            return i + 1 < n ? (*items_)[index0_ + 1] : Value::undefined("there is no next item");
        }
        if (name == "cycle") {
            std::size_t at = index0_;
            return lambda("cycle", [at](Renderer&, CallArgs& args) {
                if (args.positional.empty()) type_error("no items for cycling given");
                return args.positional[at % args.positional.size()];
            });
        }
        if (name == "changed") {
            auto last = last_changed_;
            return lambda("changed", [last](Renderer&, CallArgs& args) {
                Value now = Value::list(args.positional);
                if (!last->is_undefined() && equals(*last, now)) return Value(false);
                *last = now;
                return Value(true);
            });
        }
        return Object::get_attr(name);
    }

    std::string repr() const override {
        return "<LoopContext " + std::to_string(index0_ + 1) + "/" +
               std::to_string(items_->size()) + ">";
    }

    Value call(Renderer& r, CallArgs& args) const override {
        if (!stmt_->recursive) {
            type_error(
                "Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
        }
        if (args.positional.size() != 1) type_error("loop() takes exactly one argument");
        return Value(
            r.render_loop(*stmt_, args.positional[0], scope_->shared_from_this(), depth_ + 1));
    }

private:
    const Stmt* stmt_;
    Scope* scope_;  // pinned by the renderer when the loop is recursive
    std::shared_ptr<const std::vector<Value>> items_;
    std::size_t index0_;
    int depth_;
    std::shared_ptr<Value> last_changed_;
};

struct GlobalTable {
    std::vector<std::pair<std::string_view, Value>> entries;
    GlobalTable() {
        auto add = [this](std::string_view name, Builtin::Fn fn) {
            entries.emplace_back(name,
                                 Value::callable(std::make_shared<Builtin>(std::string(name), fn)));
        };
        add("range", g_range);
        add("namespace", g_namespace);
        add("dict", g_dict);
        add("cycler", g_cycler);
        add("joiner", g_joiner);
        add("raise_exception", g_raise_exception);
        add("strftime_now", g_strftime_now);
    }
};

}  // namespace

const Value* find_global(std::string_view name) {
    static const GlobalTable table;  // immutable after construction
    for (const auto& [k, v] : table.entries) {
        if (k == name) return &v;
    }
    return nullptr;
}

ObjectPtr make_loop_object(const Stmt* stmt, Scope* scope,
                           std::shared_ptr<const std::vector<Value>> items, std::size_t index0,
                           int depth, std::shared_ptr<Value> last_changed) {
    return std::make_shared<Loop>(stmt, scope, std::move(items), index0, depth,
                                  std::move(last_changed));
}

Value make_macro(std::shared_ptr<const MacroDef> def, Scope* closure, Value caller) {
    return Value::callable(std::make_shared<Macro>(std::move(def), closure, std::move(caller)));
}

}  // namespace brigade::model::text::jinja
