// Expressions: names, literals, attribute and item access (jinja2's sandboxed getattr and
// getitem), calls, filters, tests, boolean logic and comparisons.

#include <algorithm>

#include "model/text/jinja_renderer.hpp"

namespace brigade::model::text::jinja {

namespace {

// jinja2's `object_type_repr`, used in undefined hints: "'dict object'", "'None'".
std::string object_type(const Value& v) {
    if (v.is_none()) return "'None'";
    return std::string("'").append(v.type_name()).append(" object'");
}

}  // namespace

Value Renderer::lookup(std::string_view name, const ScopePtr& scope) {
    const Scope* bottom = scope.get();
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
        bottom = s;
        for (const auto& [k, v] : s->vars) {
            if (k == name) return v;
        }
        const LoadKind* kind = s->frame ? s->frame->find(name) : nullptr;
        if (!kind || *kind == LoadKind::alias || *kind == LoadKind::parameter) continue;
        if (*kind == LoadKind::undefined) {
            return Value::undefined(std::string("'").append(name).append("' is undefined"));
        }
        // resolve: the render variables (the outermost scope), then the globals.
        while (bottom->parent) bottom = bottom->parent.get();
        for (const auto& [k, v] : bottom->vars) {
            if (k == name) return v;
        }
        break;
    }
    if (const Value* g = find_global(name)) return *g;
    return Value::undefined(std::string("'").append(name).append("' is undefined"));
}

Value Renderer::get_attr(const Value& subject, std::string_view name) {
    switch (subject.kind()) {
        case Kind::undefined:
            fail_undefined(subject);
        case Kind::object:
            return subject.obj()->get_attr(name);
        case Kind::mapping: {
            // Python attributes win over keys: `d.items` is the method even with an "items" key.
            MethodKind m = method_kind(subject, name);
            if (m == MethodKind::safe) return make_bound_method(subject, name);
            if (m == MethodKind::unsafe) {
                return Value::undefined(
                    "access to attribute '" + std::string(name) + "' of 'dict' object is unsafe.",
                    true);
            }
            if (const Value* v = subject.map().find(name)) return *v;
            break;
        }
        default: {
            MethodKind m = method_kind(subject, name);
            if (m == MethodKind::safe) return make_bound_method(subject, name);
            if (m == MethodKind::unsafe) {
                return Value::undefined("access to attribute '" + std::string(name) + "' of '" +
                                            subject.type_name() + "' object is unsafe.",
                                        true);
            }
            break;
        }
    }
    return Value::undefined(object_type(subject) + " has no attribute '" + std::string(name) + "'");
}

Value Renderer::get_item(const Value& subject, const Value& key) {
    switch (subject.kind()) {
        case Kind::undefined:
            fail_undefined(subject);
        case Kind::mapping:
            if (const Value* v = subject.map().find(key)) return *v;
            break;
        case Kind::string:
        case Kind::sequence:
            if ((key.is_int() || key.is_bool()) && !subject.is_generator()) {
                std::int64_t i = key.is_bool() ? std::int64_t{key.as_bool()} : key.as_int();
                std::int64_t n = length(subject);
                if (i < 0) i += n;
                if (i >= 0 && i < n) {
                    if (subject.is_sequence()) return subject.items()[static_cast<std::size_t>(i)];
                    const std::string& s = subject.str();
                    if (is_ascii(s)) return Value(std::string(1, s[static_cast<std::size_t>(i)]));
                    return Value(std::string(split_code_points(s)[static_cast<std::size_t>(i)]));
                }
            }
            break;
        case Kind::object:
            if (key.is_string()) return subject.obj()->get_attr(key.str());
            break;
        default:
            break;
    }
    // jinja2 falls back to the attribute for string keys (`x['items']`).
    if (key.is_string() && !subject.is_mapping()) return get_attr(subject, key.str());
    if (key.is_string()) {
        MethodKind m = method_kind(subject, key.str());
        if (m != MethodKind::none) return get_attr(subject, key.str());
        return Value::undefined(object_type(subject) + " has no attribute '" + key.str() + "'");
    }
    return Value::undefined(object_type(subject) + " has no element " + repr(key));
}

CallArgs Renderer::eval_args(const Expr& e, const ScopePtr& scope, std::size_t first) {
    CallArgs args;
    args.positional.reserve(e.args.size() - first);
    for (std::size_t i = first; i < e.args.size(); ++i)
        args.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
}

Value Renderer::call(const Value& callee, CallArgs& args) {
    tick();
    switch (callee.kind()) {
        case Kind::callable:
            return callee.fn()->call(*this, args);
        case Kind::object:
            return callee.obj()->call(*this, args);
        case Kind::undefined:
            fail_undefined(callee);
        default:
            type_error("'" + callee.type_name() + "' object is not callable");
    }
}

Value Renderer::eval_call(const Expr& e, const ScopePtr& scope) {
    Value callee = eval(*e.args[0], scope);
    CallArgs args = eval_args(e, scope, 1);
    return call(callee, args);
}

Value Renderer::eval_slice(const Expr& e, const ScopePtr& scope) {
    Value subject = eval(*e.args[0], scope);
    Value parts[3];
    const Value* ptrs[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<std::size_t>(i) + 1]) {
            parts[i] = eval(*e.args[static_cast<std::size_t>(i) + 1], scope);
            ptrs[i] = &parts[i];
        }
    }
    if (subject.is_undefined()) fail_undefined(subject);
    if (!subject.is_string() && !subject.is_list_like()) {
        // Unsliceable: jinja2's getitem swallows the TypeError into an Undefined.
        return Value::undefined(object_type(subject) + " has no element slice");
    }
    return slice_value(subject, ptrs[0], ptrs[1], ptrs[2]);
}

Value Renderer::eval_binary(const Expr& e, const ScopePtr& scope) {
    const std::string& op = e.op;
    if (op == "and") {
        Value left = eval(*e.args[0], scope);
        return left.truthy() ? eval(*e.args[1], scope) : left;
    }
    if (op == "or") {
        Value left = eval(*e.args[0], scope);
        return left.truthy() ? left : eval(*e.args[1], scope);
    }
    Value left = eval(*e.args[0], scope);
    Value right = eval(*e.args[1], scope);
    if (op == "~") {
        std::string s = to_str(left);
        append_str(s, right);
        check_output_size(s.size());
        return Value(std::move(s));
    }
    return binary_op(op, left, right, config_.limits.max_output_bytes);
}

Value Renderer::eval_compare(const Expr& e, const ScopePtr& scope) {
    Value left = eval(*e.args[0], scope);
    for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        const std::string& op = e.ops[i];
        bool ok;
        if (op == "==") {
            ok = equals(left, right);
        } else if (op == "!=") {
            ok = !equals(left, right);
        } else if (op == "<") {
            ok = less_than(left, right);
        } else if (op == ">") {
            ok = less_than(right, left);
        } else if (op == "<=") {
            ok = equals(left, right) ? (less_than(left, right), true) : less_than(left, right);
        } else if (op == ">=") {
            ok = equals(left, right) ? (less_than(right, left), true) : less_than(right, left);
        } else if (op == "in") {
            if (right.is_undefined() && right.undef().unsafe) fail_undefined(right);
            ok = contains(right, left);
        } else {
            ok = !contains(right, left);
        }
        if (!ok) return Value(false);
        left = std::move(right);
    }
    return Value(true);
}

Value Renderer::eval(const Expr& e, const ScopePtr& scope) {
    try {
        switch (e.kind) {
            case ExprKind::literal:
                return e.value;
            case ExprKind::name:
                return lookup(e.name, scope);
            case ExprKind::list:
            case ExprKind::tuple: {
                std::vector<Value> items;
                items.reserve(e.args.size());
                for (const auto& a : e.args) items.push_back(eval(*a, scope));
                return Value::list(std::move(items),
                                   e.kind == ExprKind::tuple ? SeqFlavor::tuple : SeqFlavor::list);
            }
            case ExprKind::dict: {
                Mapping m;
                for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    Value key = eval(*e.args[i], scope);
                    if (key.is_sequence() && !key.is_generator() &&
                        key.seq().flavor == SeqFlavor::list) {
                        type_error("unhashable type: 'list'");
                    }
                    if (key.is_mapping()) type_error("unhashable type: 'dict'");
                    m.set(std::move(key), eval(*e.args[i + 1], scope));
                }
                return Value::dict(std::move(m));
            }
            case ExprKind::getattr:
                return get_attr(eval(*e.args[0], scope), e.name);
            case ExprKind::getitem: {
                Value subject = eval(*e.args[0], scope);
                return get_item(subject, eval(*e.args[1], scope));
            }
            case ExprKind::slice:
                return eval_slice(e, scope);
            case ExprKind::call:
                return eval_call(e, scope);
            case ExprKind::filter: {
                Value subject = eval(*e.args[0], scope);
                CallArgs args = eval_args(e, scope, 1);
                return apply_filter(e.name, subject, args);
            }
            case ExprKind::test: {
                Value subject = eval(*e.args[0], scope);
                CallArgs args = eval_args(e, scope, 1);
                return Value(apply_test(e.name, subject, args));
            }
            case ExprKind::unary: {
                Value v = eval(*e.args[0], scope);
                if (e.op == "not") return Value(!v.truthy());
                if (e.op == "-") return negate(v);
                if (v.is_undefined()) fail_undefined(v);
                if (!v.is_number())
                    type_error("bad operand type for unary +: '" + v.type_name() + "'");
                return v.is_bool() ? Value(std::int64_t{v.as_bool()}) : v;
            }
            case ExprKind::binary:
                return eval_binary(e, scope);
            case ExprKind::compare:
                return eval_compare(e, scope);
            case ExprKind::cond: {
                if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
                if (e.args[2]) return eval(*e.args[2], scope);
                return Value::undefined("the inline if-expression on line " +
                                        std::to_string(e.line) +
                                        " evaluated to false and no else section was defined.");
            }
        }
    } catch (TemplateException& ex) {
        if (ex.line == 0) ex.line = e.line;
        throw;
    }
    return Value();
}

}  // namespace brigade::model::text::jinja
