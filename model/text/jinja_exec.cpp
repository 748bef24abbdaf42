// Statements: output, if, for (with loop objects, filters, else, recursion), set, macros,
// call and filter blocks.

#include <algorithm>

#include "model/text/jinja_renderer.hpp"

namespace brigade::model::text::jinja {

const Value* CallArgs::get(std::size_t index, std::string_view name) const {
    if (index < positional.size()) return &positional[index];
    return keyword_arg(name);
}

const Value* CallArgs::keyword_arg(std::string_view name) const {
    for (const auto& [k, v] : keyword) {
        if (k == name) return &v;
    }
    return nullptr;
}

const Value* Scope::find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
        for (const auto& [k, v] : s->vars) {
            if (k == name) return &v;
        }
    }
    return nullptr;
}

void Scope::set(std::string_view name, Value value) {
    for (auto& [k, v] : vars) {
        if (k == name) {
            v = std::move(value);
            return;
        }
    }
    vars.emplace_back(std::string(name), std::move(value));
}

void Renderer::tick() {
    if (++steps_ > config_.limits.max_steps) {
        raise("RuntimeError", "template exceeded its step budget (" +
                                  std::to_string(config_.limits.max_steps) + " steps)");
    }
}

void Renderer::check_output_size(std::size_t n) const {
    if (n > config_.limits.max_output_bytes) {
        raise("RuntimeError", "template output exceeds " +
                                  std::to_string(config_.limits.max_output_bytes) + " bytes");
    }
}

Renderer::~Renderer() {
    for (const auto& ns : namespaces_) ns->release();
}

void Renderer::pin(const ScopePtr& scope) {
    if (pinned_.empty() || pinned_.back() != scope) pinned_.push_back(scope);
}

void Renderer::render(const Body& body, const ScopePtr& scope, std::string& out) {
    exec(body, scope, out);
}

Renderer::Flow Renderer::exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
        Flow f = exec_stmt(*s, scope, out);
        if (f != Flow::normal) return f;
    }
    return Flow::normal;
}

std::string Renderer::capture(const Body& body, const ScopePtr& scope) {
    std::string out;
    exec(body, scope, out);
    return out;
}

namespace {

// Applies a filter chain whose innermost subject is missing (`{% filter trim|upper %}`,
// `{% set x | trim %}`) to `subject`.
Value apply_chain(Renderer& r, const Expr& e, Value subject, const ScopePtr& scope) {
    if (e.args[0]) subject = apply_chain(r, *e.args[0], std::move(subject), scope);
    CallArgs args;
    for (std::size_t i = 1; i < e.args.size(); ++i)
        args.positional.push_back(r.eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, r.eval(*v, scope));
    return r.apply_filter(e.name, subject, args);
}

}  // namespace

Renderer::Flow Renderer::exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
    tick();
    try {
        switch (s.kind) {
            case StmtKind::text:
                out += s.text;
                check_output_size(out.size());
                return Flow::normal;
            case StmtKind::print:
                append_str(out, eval(*s.expr, scope));
                check_output_size(out.size());
                return Flow::normal;
            case StmtKind::if_:
                for (const auto& branch : s.branches) {
                    if (eval(*branch.cond, scope).truthy()) return exec(branch.body, scope, out);
                }
                return exec(s.else_body, scope, out);
            case StmtKind::for_:
                exec_for(s, eval(*s.expr, scope), scope, out, 0);
                return Flow::normal;
            case StmtKind::set:
                assign(s.target, eval(*s.expr, scope), scope);
                return Flow::normal;
            case StmtKind::set_block: {
                auto inner = std::make_shared<Scope>(scope);
                inner->frame = s.frame.get();
                Value content(capture(s.body, inner));
                if (s.expr) content = apply_chain(*this, *s.expr, std::move(content), scope);
                assign(s.target, content, scope);
                return Flow::normal;
            }
            case StmtKind::macro:
                pin(scope);
                scope->set(s.macro->name, make_macro(s.macro, scope.get(), Value()));
                return Flow::normal;
            case StmtKind::call_block: {
                const Expr& call_expr = *s.expr;
                Value callee = eval(*call_expr.args[0], scope);
                CallArgs args = eval_args(call_expr, scope, 1);
                pin(scope);
                args.keyword.emplace_back("caller", make_macro(s.macro, scope.get(), Value()));
                append_str(out, call(callee, args));
                check_output_size(out.size());
                return Flow::normal;
            }
            case StmtKind::filter_block: {
                auto inner = std::make_shared<Scope>(scope);
                inner->frame = s.frame.get();
                Value content(capture(s.body, inner));
                append_str(out, apply_chain(*this, *s.expr, std::move(content), scope));
                check_output_size(out.size());
                return Flow::normal;
            }
            case StmtKind::with: {
                auto inner = std::make_shared<Scope>(scope);
                inner->frame = s.frame.get();
                for (std::size_t i = 0; i < s.with_targets.size(); ++i) {
                    assign(s.with_targets[i], eval(*s.with_values[i], scope), inner);
                }
                return exec(s.body, inner, out);
            }
            case StmtKind::break_:
                return Flow::break_loop;
            case StmtKind::continue_:
                return Flow::continue_loop;
            case StmtKind::body:
                return exec(s.body, scope, out);
        }
    } catch (TemplateException& e) {
        if (e.line == 0) e.line = s.line;
        throw;
    }
    return Flow::normal;
}

void Renderer::exec_for(const Stmt& s, const Value& iterable, const ScopePtr& scope,
                        std::string& out, int depth) {
    if (iterable.is_undefined() && iterable.undef().unsafe) fail_undefined(iterable);
    std::vector<Value> items = iterate(iterable);
    if (s.cond) {
        // `for x in xs if cond`: filtered before the loop starts, so loop.length/index count
        // only the items that pass.
        std::vector<Value> kept;
        for (auto& item : items) {
            tick();
            auto probe = std::make_shared<Scope>(scope);
            assign(s.target, item, probe);
            if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        exec(s.else_body, std::make_shared<Scope>(scope), out);
        return;
    }
    if (s.recursive) pin(scope);
    auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
    auto last_changed = std::make_shared<Value>();
    for (std::size_t i = 0; i < shared->size(); ++i) {
        tick();
        auto iter_scope = std::make_shared<Scope>(scope);
        iter_scope->frame = s.frame.get();
        assign(s.target, (*shared)[i], iter_scope);
        iter_scope->set("loop", Value::object(make_loop_object(&s, scope.get(), shared, i, depth,
                                                               last_changed)));
        Flow f = exec(s.body, iter_scope, out);
        if (f == Flow::break_loop) break;
    }
}

std::string Renderer::render_loop(const Stmt& stmt, const Value& iterable, const ScopePtr& scope,
                                  int depth) {
    if (++call_depth_ > config_.limits.max_call_depth) {
        raise("RecursionError", "maximum recursion depth exceeded in a recursive loop");
    }
    std::string out;
    exec_for(stmt, iterable, scope, out, depth);
    --call_depth_;
    return out;
}

void Renderer::assign(const Target& target, const Value& value, const ScopePtr& scope) {
    switch (target.kind) {
        case Target::Kind::name:
            scope->set(target.name, value);
            return;
        case Target::Kind::ns_attr: {
            Value ns = lookup(target.name, scope);
            if (!ns.is_object() || !ns.obj()->set_attr(target.attr, value)) {
                raise("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
            }
            return;
        }
        case Target::Kind::tuple: {
            if (value.is_undefined()) fail_undefined(value);
            std::vector<Value> parts = iterate(value);
            std::size_t want = target.items.size();
            if (parts.size() < want) {
                raise("ValueError", "not enough values to unpack (expected " +
                                        std::to_string(want) + ", got " +
                                        std::to_string(parts.size()) + ")");
            }
            if (parts.size() > want) {
                raise("ValueError",
                      "too many values to unpack (expected " + std::to_string(want) + ")");
            }
            for (std::size_t i = 0; i < want; ++i) assign(target.items[i], parts[i], scope);
            return;
        }
    }
}

Value Renderer::call_macro(const MacroDef& def, const ScopePtr& closure, CallArgs& args,
                           const Value& caller) {
    if (++call_depth_ > config_.limits.max_call_depth) {
        raise("RecursionError",
              "maximum recursion depth exceeded calling macro '" + def.name + "'");
    }
    auto scope = std::make_shared<Scope>(closure);
    scope->frame = def.frame.get();
    const std::size_t n_params = def.params.size();
    if (args.positional.size() > n_params && !def.uses_varargs) {
        type_error("macro '" + def.name + "' takes not more than " + std::to_string(n_params) +
                   " argument(s)");
    }
    Mapping extra_kwargs;
    Value caller_value = caller;
    std::vector<bool> bound(n_params, false);
    for (std::size_t i = 0; i < n_params && i < args.positional.size(); ++i) {
        scope->set(def.params[i].name, args.positional[i]);
        bound[i] = true;
    }
    for (auto& kv : args.keyword) {
        const std::string& key = kv.first;
        const Value& value = kv.second;
        auto it = std::find_if(def.params.begin(), def.params.end(),
                               [&](const MacroParam& p) { return p.name == key; });
        if (it != def.params.end()) {
            auto idx = static_cast<std::size_t>(it - def.params.begin());
            if (bound[idx]) {
                type_error("macro '" + def.name + "' got multiple values for argument '" + key +
                           "'");
            }
            scope->set(key, value);
            bound[idx] = true;
        } else if (key == "caller" && def.uses_caller) {
            caller_value = value;
        } else if (def.uses_kwargs) {
            extra_kwargs.set(Value(key), value);
        } else {
            type_error("macro '" + def.name + "' takes no keyword argument '" + key + "'");
        }
    }
    for (std::size_t i = 0; i < n_params; ++i) {
        if (bound[i]) continue;
        const MacroParam& p = def.params[i];
        scope->set(p.name, p.default_value
                               ? eval(*p.default_value, scope)
                               : Value::undefined("parameter '" + p.name + "' was not provided"));
    }
    if (def.uses_varargs) {
        std::vector<Value> rest;
        for (std::size_t i = n_params; i < args.positional.size(); ++i) {
            rest.push_back(args.positional[i]);
        }
        scope->set("varargs", Value::tuple(std::move(rest)));
    }
    if (def.uses_kwargs) scope->set("kwargs", Value::dict(std::move(extra_kwargs)));
    if (def.uses_caller) {
        scope->set("caller", caller_value.is_undefined() ? Value::undefined("No caller defined")
                                                         : caller_value);
    }
    std::string out;
    exec(def.body, scope, out);
    --call_depth_;
    return Value(std::move(out));
}

}  // namespace brigade::model::text::jinja
