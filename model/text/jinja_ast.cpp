// Queries over the syntax tree used by the parser.

#include "model/text/jinja_ast.hpp"

#include <algorithm>

namespace brigade::model::text::jinja {

namespace {

bool expr_mentions(const Expr* e, std::string_view name) {
    if (!e) return false;
    if (e->kind == ExprKind::name && e->name == name) return true;
    for (const auto& a : e->args) {
        if (expr_mentions(a.get(), name)) return true;
    }
    for (const auto& kw : e->kwargs) {
        if (expr_mentions(kw.second.get(), name)) return true;
    }
    return false;
}

bool stmt_mentions(const Stmt& s, std::string_view name) {
    if (expr_mentions(s.expr.get(), name) || expr_mentions(s.cond.get(), name)) return true;
    for (const auto& b : s.branches) {
        if (expr_mentions(b.cond.get(), name) || body_mentions(b.body, name)) return true;
    }
    for (const auto& v : s.with_values) {
        if (expr_mentions(v.get(), name)) return true;
    }
    if (s.macro) {
        for (const auto& p : s.macro->params) {
            if (expr_mentions(p.default_value.get(), name)) return true;
        }
        if (body_mentions(s.macro->body, name)) return true;
    }
    return body_mentions(s.body, name) || body_mentions(s.else_body, name);
}

void collect_names(const Expr* e, std::vector<std::string>& out) {
    if (!e) return;
    if (e->kind == ExprKind::name) out.push_back(e->name);
    for (const auto& a : e->args) collect_names(a.get(), out);
    for (const auto& kw : e->kwargs) collect_names(kw.second.get(), out);
}

// jinja2's symbol tracking for the template's top-level frame (idtracking.py): a name whose
// first mention at top level is an unconditional assignment is a template-local that starts out
// undefined, so loops and macros reading it before the assignment runs see Undefined; a name
// first *read* at top level, or assigned only inside an `if`, starts from the context.
class RootWalk {
public:
    std::vector<std::string> pending;

    void walk(const Body& body, bool conditional) {
        for (const auto& s : body) {
            switch (s->kind) {
                case StmtKind::print:
                case StmtKind::for_:  // only the iterable belongs to this frame
                case StmtKind::call_block:
                case StmtKind::filter_block:
                    load(s->expr.get());
                    break;
                case StmtKind::if_:
                    for (const auto& b : s->branches) load(b.cond.get());
                    for (const auto& b : s->branches) walk(b.body, true);
                    walk(s->else_body, true);
                    break;
                case StmtKind::set:
                case StmtKind::set_block:
                    load(s->expr.get());
                    store(s->target, conditional);
                    break;
                case StmtKind::macro:
                    store_name(s->macro->name, conditional);
                    break;
                case StmtKind::with:
                    for (const auto& v : s->with_values) load(v.get());
                    break;
                case StmtKind::body:
                    walk(s->body, conditional);
                    break;
                default:
                    break;
            }
        }
    }

private:
    bool seen(const std::string& name) const {
        return std::find(seen_.begin(), seen_.end(), name) != seen_.end();
    }
    void load(const Expr* e) {
        std::vector<std::string> names;
        collect_names(e, names);
        for (auto& n : names) {
            if (!seen(n)) seen_.push_back(std::move(n));
        }
    }
    void store_name(const std::string& name, bool conditional) {
        if (seen(name)) return;
        seen_.push_back(name);
        if (!conditional) pending.push_back(name);
    }
    void store(const Target& t, bool conditional) {
        switch (t.kind) {
            case Target::Kind::name:
                store_name(t.name, conditional);
                break;
            case Target::Kind::ns_attr:  // reads the namespace
                if (!seen(t.name)) seen_.push_back(t.name);
                break;
            case Target::Kind::tuple:
                for (const auto& item : t.items) store(item, conditional);
                break;
        }
    }
    std::vector<std::string> seen_;
};

}  // namespace

std::vector<std::string> root_pending_names(const Body& body) {
    RootWalk walk;
    walk.walk(body, false);
    return std::move(walk.pending);
}

void mark_soft(Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::filter || e->kind == ExprKind::test) e->soft = true;
    for (auto& a : e->args) mark_soft(a.get());
    for (auto& kw : e->kwargs) mark_soft(kw.second.get());
}

bool body_mentions(const Body& body, std::string_view name) {
    return std::any_of(body.begin(), body.end(),
                       [&](const StmtPtr& s) { return stmt_mentions(*s, name); });
}

}  // namespace brigade::model::text::jinja
