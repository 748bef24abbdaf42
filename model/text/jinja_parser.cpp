#include "model/text/jinja_parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "model/text/jinja_lexer.hpp"
#include "model/text/jinja_parser_expr.hpp"

namespace brigade::model::text::jinja {

namespace {

class Parser : public ExprParser {
public:
    using ExprParser::ExprParser;

    Body parse() {
        Body body = subparse({});
        if (cur().type != TokenType::eof)
            fail("unexpected '" + describe_token(cur()) + "'", cur().line);
        return body;
    }

private:
    // ---- statements ---------------------------------------------------------------------

    Body subparse(std::initializer_list<std::string_view> end_names) {
        DepthGuard guard(*this);
        Body body;
        while (cur().type != TokenType::eof) {
            const Token& t = cur();
            if (t.type == TokenType::data) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::text;
                s->line = t.line;
                s->text = t.text;
                body.push_back(std::move(s));
                next();
            } else if (t.type == TokenType::variable_begin) {
                int line = t.line;
                next();
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::print;
                s->line = line;
                s->expr = parse_tuple(true);
                if (cur().type != TokenType::variable_end) {
                    fail("expected token 'end of print statement', got '" + describe_token(cur()) +
                             "'",
                         cur().line);
                }
                next();
                body.push_back(std::move(s));
            } else if (t.type == TokenType::block_begin) {
                next();
                if (cur().type == TokenType::name &&
                    std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end()) {
                    return body;
                }
                body.push_back(parse_statement());
                expect_block_end();
            } else {
                fail("unexpected '" + describe_token(t) + "'", t.line);
            }
        }
        if (end_names.size() > 0) {
            std::string looking;
            for (auto n : end_names)
                looking += (looking.empty() ? "'" : " or '") + std::string(n) + "'";
            fail("Unexpected end of template. Jinja was looking for the following tags: " +
                     looking + ".",
                 cur().line);
        }
        return body;
    }

    // Parses `%}` body up to one of `end_names`; leaves the end name as the current token.
    Body parse_statements(std::initializer_list<std::string_view> end_names) {
        skip_op(":");
        expect_block_end();
        return subparse(end_names);
    }

    StmtPtr parse_statement() {
        DepthGuard guard(*this);
        const Token& t = cur();
        if (t.type != TokenType::name) fail("tag name expected", t.line);
        std::string tag = t.text;
        int line = t.line;
        auto s = std::make_unique<Stmt>();
        s->line = line;
        if (tag == "if") return parse_if();
        if (tag == "for") return parse_for();
        if (tag == "set") return parse_set();
        if (tag == "macro") return parse_macro();
        if (tag == "call") return parse_call_block();
        if (tag == "filter") return parse_filter_block();
        if (tag == "with") return parse_with();
        if (tag == "break" || tag == "continue") {
            next();
            s->kind = tag == "break" ? StmtKind::break_ : StmtKind::continue_;
            return s;
        }
        if (tag == "print") {
            next();
            s->kind = StmtKind::print;
            s->expr = parse_tuple(true);
            return s;
        }
        if (tag == "generation") {  // transformers' AssistantTracker: render the body as-is
            next();
            s->kind = StmtKind::body;
            s->body = parse_statements({"endgeneration"});
            next();
            return s;
        }
        if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
            tag == "from" || tag == "autoescape") {
            fail("the '" + tag + "' tag is not supported in chat templates", line);
        }
        fail("Encountered unknown tag '" + tag + "'.", line);
    }

    StmtPtr parse_if() {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::if_;
        s->line = next().line;
        ++soft_;
        while (true) {
            IfBranch branch;
            branch.cond = parse_tuple(false);
            branch.body = parse_statements({"elif", "else", "endif"});
            s->branches.push_back(std::move(branch));
            std::string t = next().text;
            if (t == "elif") continue;
            if (t == "else") {
                s->else_body = parse_statements({"endif"});
                next();
            }
            break;
        }
        --soft_;
        return s;
    }

    StmtPtr parse_for() {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::for_;
        s->line = next().line;
        int saved_soft = soft_;
        soft_ = 0;
        s->target = parse_assign_target(false, "in");
        expect_name("in");
        s->expr = parse_tuple(false, "recursive");
        if (skip_name("if")) s->cond = parse_expression(true);
        s->recursive = skip_name("recursive");
        s->body = parse_statements({"endfor", "else"});
        if (next().text == "else") {
            s->else_body = parse_statements({"endfor"});
            next();
        }
        soft_ = saved_soft;
        return s;
    }

    StmtPtr parse_set() {
        auto s = std::make_unique<Stmt>();
        s->line = next().line;
        s->target = parse_assign_target(true, "");
        if (skip_op("=")) {
            s->kind = StmtKind::set;
            s->expr = parse_tuple(true);
            return s;
        }
        s->kind = StmtKind::set_block;
        if (is_op("|")) s->expr = parse_filter(nullptr, false);
        s->body = parse_statements({"endset"});
        next();
        return s;
    }

    std::vector<MacroParam> parse_signature() {
        std::vector<MacroParam> params;
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            MacroParam p;
            p.name = expect_identifier();
            if (skip_op("=")) {
                p.default_value = parse_expression(true);
            } else if (!params.empty() && params.back().default_value) {
                fail("non-default argument follows default argument", cur().line);
            }
            params.push_back(std::move(p));
        }
        expect_op(")");
        return params;
    }

    void finish_macro(MacroDef& m) {
        m.uses_caller = body_mentions(m.body, "caller");
        m.uses_varargs = body_mentions(m.body, "varargs");
        m.uses_kwargs = body_mentions(m.body, "kwargs");
    }

    StmtPtr parse_macro() {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::macro;
        s->line = next().line;
        int saved_soft = soft_;
        soft_ = 0;
        s->macro = std::make_shared<MacroDef>();
        s->macro->name = expect_identifier();
        s->macro->params = parse_signature();
        s->macro->body = parse_statements({"endmacro"});
        next();
        finish_macro(*s->macro);
        soft_ = saved_soft;
        return s;
    }

    StmtPtr parse_call_block() {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::call_block;
        s->line = next().line;
        int saved_soft = soft_;
        soft_ = 0;
        s->macro = std::make_shared<MacroDef>();
        s->macro->name = "caller";
        if (is_op("(")) s->macro->params = parse_signature();
        s->expr = parse_expression(true);
        if (s->expr->kind != ExprKind::call) fail("expected call", s->line);
        s->macro->body = parse_statements({"endcall"});
        next();
        finish_macro(*s->macro);
        soft_ = saved_soft;
        return s;
    }

    StmtPtr parse_filter_block() {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::filter_block;
        s->line = next().line;
        s->expr = parse_filter(nullptr, true);
        s->body = parse_statements({"endfilter"});
        next();
        return s;
    }

    StmtPtr parse_with() {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::with;
        s->line = next().line;
        while (cur().type != TokenType::block_end) {
            if (!s->with_targets.empty()) expect_op(",");
            s->with_targets.push_back(parse_assign_target(false, ""));
            expect_op("=");
            s->with_values.push_back(parse_expression(true));
        }
        s->body = parse_statements({"endwith"});
        next();
        return s;
    }

    // `name`, `ns.attr` (set only) or a tuple of names, as jinja2's parse_assign_target.
    Target parse_assign_target(bool with_namespace, std::string_view extra_end) {
        if (with_namespace && cur().type == TokenType::name && look().type == TokenType::op &&
            look().text == ".") {
            Target t;
            t.kind = Target::Kind::ns_attr;
            t.name = next().text;
            next();
            t.attr = expect_identifier();
            return t;
        }
        std::vector<Target> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (cur().type == TokenType::block_end || is_op(")") ||
                (!extra_end.empty() && is_name(extra_end))) {
                break;
            }
            items.push_back(parse_target_primary());
            if (is_op(",")) {
                is_tuple = true;
            } else {
                break;
            }
        }
        if (items.empty()) fail("expected an assignment target", cur().line);
        if (!is_tuple) return std::move(items[0]);
        Target t;
        t.kind = Target::Kind::tuple;
        t.items = std::move(items);
        return t;
    }

    Target parse_target_primary() {
        if (skip_op("(")) {
            Target t = parse_assign_target(false, "");
            expect_op(")");
            return t;
        }
        if (cur().type != TokenType::name) {
            fail("can't assign to '" + describe_token(cur()) + "'", cur().line);
        }
        static constexpr std::string_view kConstants[] = {"true", "false", "none",
                                                          "True", "False", "None"};
        for (auto c : kConstants) {
            if (cur().text == c) fail("can't assign to 'const'", cur().line);
        }
        Target t;
        t.name = next().text;
        return t;
    }
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace brigade::model::text::jinja
