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

}  // namespace

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
