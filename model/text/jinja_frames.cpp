// Symbol tables per frame, as jinja2's compiler builds them (idtracking.py). They decide what a
// name means before it is assigned in a frame: the enclosing frame's value, the render variable,
// or undefined. Real templates rarely notice, but e.g. a top-level `{% set x = ... %}` placed
// after a loop makes `x` undefined inside that loop, and jinja2 renders it so.

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/text/jinja_ast.hpp"

namespace brigade::model::text::jinja {

namespace {

void collect(const Expr* e, std::vector<std::string>& out) {
    if (!e) return;
    if (e->kind == ExprKind::name) out.push_back(e->name);
    for (const auto& a : e->args) collect(a.get(), out);
    for (const auto& kw : e->kwargs) collect(kw.second.get(), out);
}

void target_names(const Target& t, std::vector<std::string>& out) {
    if (t.kind == Target::Kind::tuple) {
        for (const auto& item : t.items) target_names(item, out);
    } else if (t.kind == Target::Kind::name) {
        out.push_back(t.name);
    }
}

class FrameBuilder {
public:
    FrameBuilder(FrameRefs& frame, const FrameBuilder* parent) : frame_(frame), parent_(parent) {}

    bool find_ref(const std::string& name) const {
        return frame_.find(name) != nullptr || (parent_ && parent_->find_ref(name));
    }

    void param(const std::string& name) {
        for (auto& [n, k] : frame_.refs) {
            if (n == name) {
                k = LoadKind::parameter;
                return;
            }
        }
        frame_.refs.emplace_back(name, LoadKind::parameter);
    }

    // Analyses this frame's own statements first, then the nested frames: jinja2 builds a
    // frame's table completely before compiling the frames inside it.
    void run(Body& body) {
        visit(body);
        for (auto& job : children_) {
            *job.slot = std::make_shared<FrameRefs>();
            FrameBuilder inner(**job.slot, this);
            for (const auto& p : job.params) inner.param(p);
            for (const Expr* e : job.loads) inner.load(e);
            inner.run(*job.body);
        }
    }

private:
    struct ChildJob {
        std::shared_ptr<FrameRefs>* slot;
        Body* body;
        std::vector<std::string> params;
        std::vector<const Expr*> loads;
    };

    void visit(Body& body) {
        for (auto& s : body) visit(*s);
    }

    void load(const Expr* e) {
        std::vector<std::string> names;
        collect(e, names);
        for (const auto& n : names) {
            if (!find_ref(n)) frame_.refs.emplace_back(n, LoadKind::resolve);
        }
    }

    void store(const std::string& name) {
        if (std::find(stores_.begin(), stores_.end(), name) == stores_.end())
            stores_.push_back(name);
        if (frame_.find(name)) return;
        frame_.refs.emplace_back(
            name, parent_ && parent_->find_ref(name) ? LoadKind::alias : LoadKind::undefined);
    }

    void store(const Target& t) {
        if (t.kind == Target::Kind::ns_attr) {  // reads the namespace
            if (!find_ref(t.name)) frame_.refs.emplace_back(t.name, LoadKind::resolve);
            return;
        }
        std::vector<std::string> names;
        target_names(t, names);
        for (const auto& n : names) store(n);
    }

    // A nested frame for `body`, whose parameters are `params`.
    void child(std::shared_ptr<FrameRefs>& slot, Body& body, std::vector<std::string> params,
               std::vector<const Expr*> child_loads = {}) {
        children_.push_back({&slot, &body, std::move(params), std::move(child_loads)});
    }

    // jinja2's visit_If + branch_update: the if body, the elif chain and the else are three
    // branches; a name newly assigned in only some of them falls back to the enclosing value
    // (or the render variable) when its branch did not run.
    void visit_if(Stmt& s) {
        for (const auto& b : s.branches) load(b.cond.get());
        const std::vector<std::pair<std::string, LoadKind>> before = frame_.refs;
        const std::vector<std::string> stores_before = stores_;
        std::array<std::vector<std::string>, 3> branch_stores;
        std::vector<std::pair<std::string, LoadKind>> merged = before;
        for (int g = 0; g < 3; ++g) {
            frame_.refs = before;
            stores_ = stores_before;
            if (g == 0) {
                visit(s.branches[0].body);
            } else if (g == 1) {
                for (std::size_t i = 1; i < s.branches.size(); ++i) visit(s.branches[i].body);
            } else {
                visit(s.else_body);
            }
            for (const auto& name : stores_) {
                bool old = std::find(stores_before.begin(), stores_before.end(), name) !=
                           stores_before.end();
                if (!old) branch_stores[static_cast<std::size_t>(g)].push_back(name);
            }
            for (const auto& ref : frame_.refs) {
                auto it = std::find_if(merged.begin(), merged.end(),
                                       [&](const auto& m) { return m.first == ref.first; });
                if (it == merged.end()) {
                    merged.push_back(ref);
                } else {
                    it->second = ref.second;
                }
            }
        }
        frame_.refs = std::move(merged);
        stores_ = stores_before;
        std::vector<std::string> seen;
        for (const auto& group : branch_stores) {
            for (const auto& name : group) {
                if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
                seen.push_back(name);
                stores_.push_back(name);
                int count = 0;
                for (const auto& g : branch_stores)
                    count += std::find(g.begin(), g.end(), name) != g.end();
                if (count == 3) continue;
                for (auto& [n, k] : frame_.refs) {
                    if (n == name)
                        k = parent_ && parent_->find_ref(name) ? LoadKind::alias
                                                               : LoadKind::resolve;
                }
            }
        }
    }

    void visit(Stmt& s) {
        switch (s.kind) {
            case StmtKind::print:
                load(s.expr.get());
                break;
            case StmtKind::if_:
                visit_if(s);
                break;
            case StmtKind::for_: {
                load(s.expr.get());
                std::vector<std::string> params;
                target_names(s.target, params);
                params.push_back("loop");
                child(s.frame, s.body, params);
                break;
            }
            case StmtKind::set:
                load(s.expr.get());
                store(s.target);
                break;
            case StmtKind::set_block:
                load(s.expr.get());
                child(s.frame, s.body, {});
                store(s.target);
                break;
            case StmtKind::macro:
            case StmtKind::call_block: {
                if (s.kind == StmtKind::macro) {
                    store(s.macro->name);
                } else {
                    load(s.expr.get());
                }
                std::vector<std::string> params;
                std::vector<const Expr*> defaults;
                for (const auto& p : s.macro->params) {
                    params.push_back(p.name);
                    defaults.push_back(p.default_value.get());
                }
                if (s.macro->uses_caller) params.push_back("caller");
                if (s.macro->uses_varargs) params.push_back("varargs");
                if (s.macro->uses_kwargs) params.push_back("kwargs");
                child(s.macro->frame, s.macro->body, params, defaults);
                break;
            }
            case StmtKind::filter_block:
                load(s.expr.get());
                child(s.frame, s.body, {});
                break;
            case StmtKind::with: {
                for (const auto& v : s.with_values) load(v.get());
                std::vector<std::string> params;
                for (const auto& t : s.with_targets) target_names(t, params);
                child(s.frame, s.body, params);
                break;
            }
            case StmtKind::body:
                visit(s.body);
                break;
            default:
                break;
        }
    }

    FrameRefs& frame_;
    const FrameBuilder* parent_;
    std::vector<std::string> stores_;
    std::vector<ChildJob> children_;
};

}  // namespace

FrameRefs analyze_frames(Body& body) {
    FrameRefs root;
    FrameBuilder(root, nullptr).run(body);
    return root;
}

}  // namespace brigade::model::text::jinja
