#include "model/text/jinja_parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "model/text/jinja_lexer.hpp"

namespace brigade::model::text::jinja {

namespace {

// Deeper nesting than this is refused: real templates nest a dozen levels, and a hostile one
// must not exhaust the stack.
constexpr int kMaxNesting = 200;

[[noreturn]] void fail(std::string message, int line, std::string kind = "TemplateSyntaxError") {
    throw TemplateException{std::move(kind), std::move(message), line};
}

std::string describe(const Token& t) {
    switch (t.type) {
        case TokenType::eof:
            return "end of template";
        case TokenType::block_end:
            return "end of statement block";
        case TokenType::variable_end:
            return "end of print statement";
        case TokenType::block_begin:
            return "begin of statement block";
        case TokenType::variable_begin:
            return "begin of print statement";
        case TokenType::data:
            return "template data / text";
        case TokenType::integer:
        case TokenType::floating:
            return t.text.empty() ? "number" : t.text;
        default:
            return t.text;
    }
}

void mark_soft(Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::filter || e->kind == ExprKind::test) e->soft = true;
    for (auto& a : e->args) mark_soft(a.get());
    for (auto& kw : e->kwargs) mark_soft(kw.second.get());
}

bool mentions_name(const Expr* e, std::string_view name) {
    if (!e) return false;
    if (e->kind == ExprKind::name && e->name == name) return true;
    for (const auto& a : e->args) {
        if (mentions_name(a.get(), name)) return true;
    }
    for (const auto& kw : e->kwargs) {
        if (mentions_name(kw.second.get(), name)) return true;
    }
    return false;
}

bool body_mentions(const Body& body, std::string_view name);

bool stmt_mentions(const Stmt& s, std::string_view name) {
    if (mentions_name(s.expr.get(), name) || mentions_name(s.cond.get(), name)) return true;
    for (const auto& b : s.branches) {
        if (mentions_name(b.cond.get(), name) || body_mentions(b.body, name)) return true;
    }
    for (const auto& v : s.with_values) {
        if (mentions_name(v.get(), name)) return true;
    }
    if (s.macro) {
        for (const auto& p : s.macro->params) {
            if (mentions_name(p.default_value.get(), name)) return true;
        }
        if (body_mentions(s.macro->body, name)) return true;
    }
    return body_mentions(s.body, name) || body_mentions(s.else_body, name);
}

bool body_mentions(const Body& body, std::string_view name) {
    return std::any_of(body.begin(), body.end(),
                       [&](const StmtPtr& s) { return stmt_mentions(*s, name); });
}

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

    Body parse() {
        Body body = subparse({});
        if (cur().type != TokenType::eof) fail("unexpected '" + describe(cur()) + "'", cur().line);
        return body;
    }

private:
    struct DepthGuard {
        explicit DepthGuard(Parser& p) : p_(p) {
            if (++p_.depth_ > kMaxNesting) fail("template nesting too deep", p_.cur().line);
        }
        ~DepthGuard() { --p_.depth_; }
        Parser& p_;
    };

    const Token& cur() const { return tokens_[pos_]; }
    const Token& look(std::size_t n = 1) const {
        return tokens_[std::min(pos_ + n, tokens_.size() - 1)];
    }
    const Token& next() {
        const Token& t = tokens_[pos_];
        if (pos_ + 1 < tokens_.size()) ++pos_;
        return t;
    }
    bool is_op(std::string_view op) const {
        return cur().type == TokenType::op && cur().text == op;
    }
    bool is_name(std::string_view name) const {
        return cur().type == TokenType::name && cur().text == name;
    }
    bool skip_op(std::string_view op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!is_name(name)) return false;
        next();
        return true;
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) {
            fail("expected token '" + std::string(op) + "', got '" + describe(cur()) + "'",
                 cur().line);
        }
    }
    void expect_name(std::string_view name) {
        if (!skip_name(name)) {
            fail("expected token '" + std::string(name) + "', got '" + describe(cur()) + "'",
                 cur().line);
        }
    }
    std::string expect_identifier() {
        if (cur().type != TokenType::name) {
            fail("expected token 'name', got '" + describe(cur()) + "'", cur().line);
        }
        return next().text;
    }
    void expect_block_end() {
        if (cur().type != TokenType::block_end) {
            fail("expected token 'end of statement block', got '" + describe(cur()) + "'",
                 cur().line);
        }
        next();
    }

    static ExprPtr make(ExprKind kind, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = line;
        return e;
    }

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
                    fail("expected token 'end of print statement', got '" + describe(cur()) + "'",
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
                fail("unexpected '" + describe(t) + "'", t.line);
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
            fail("can't assign to '" + describe(cur()) + "'", cur().line);
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

    // ---- expressions --------------------------------------------------------------------

    // A comma-separated list becomes a tuple (`{{ a, b }}`, `for x in a, b`).
    ExprPtr parse_tuple(bool with_condexpr, std::string_view extra_end = "") {
        int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (cur().type == TokenType::variable_end || cur().type == TokenType::block_end ||
                is_op(")") || (!extra_end.empty() && is_name(extra_end))) {
                break;
            }
            items.push_back(parse_expression(with_condexpr));
            if (is_op(",")) {
                is_tuple = true;
            } else {
                break;
            }
        }
        if (!is_tuple) {
            if (items.empty())
                fail("Expected an expression, got '" + describe(cur()) + "'", cur().line);
            return std::move(items[0]);
        }
        auto e = make(ExprKind::tuple, line);
        e->args = std::move(items);
        return e;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        DepthGuard guard(*this);
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    ExprPtr parse_condexpr() {
        int line = cur().line;
        ExprPtr expr1 = parse_or();
        while (is_name("if")) {
            next();
            mark_soft(expr1.get());
            ++soft_;
            ExprPtr test = parse_or();
            ExprPtr expr3;
            if (skip_name("else")) expr3 = parse_condexpr();
            --soft_;
            auto e = make(ExprKind::cond, line);
            e->args.push_back(std::move(test));
            e->args.push_back(std::move(expr1));
            e->args.push_back(std::move(expr3));
            expr1 = std::move(e);
            line = cur().line;
        }
        return expr1;
    }

    ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
        auto e = make(ExprKind::binary, line);
        e->op = std::move(op);
        e->args.push_back(std::move(left));
        e->args.push_back(std::move(right));
        return e;
    }

    ExprPtr parse_or() {
        int line = cur().line;
        ExprPtr left = parse_and();
        while (skip_name("or")) left = binary("or", std::move(left), parse_and(), line);
        return left;
    }

    ExprPtr parse_and() {
        int line = cur().line;
        ExprPtr left = parse_not();
        while (skip_name("and")) left = binary("and", std::move(left), parse_not(), line);
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            int line = next().line;
            auto e = make(ExprKind::unary, line);
            e->op = "not";
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        int line = cur().line;
        ExprPtr expr = parse_math1();
        ExprPtr cmp;
        while (true) {
            std::string op;
            if (cur().type == TokenType::op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = next().text;
            } else if (skip_name("in")) {
                op = "in";
            } else if (is_name("not") && look().type == TokenType::name && look().text == "in") {
                next();
                next();
                op = "notin";
            } else {
                break;
            }
            if (!cmp) {
                cmp = make(ExprKind::compare, line);
                cmp->args.push_back(std::move(expr));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(expr);
    }

    ExprPtr parse_math1() {
        int line = cur().line;
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = next().text;
            left = binary(op, std::move(left), parse_concat(), line);
        }
        return left;
    }

    ExprPtr parse_concat() {
        int line = cur().line;
        ExprPtr left = parse_math2();
        while (skip_op("~")) left = binary("~", std::move(left), parse_math2(), line);
        return left;
    }

    ExprPtr parse_math2() {
        int line = cur().line;
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = next().text;
            left = binary(op, std::move(left), parse_pow(), line);
        }
        return left;
    }

    ExprPtr parse_pow() {
        int line = cur().line;
        ExprPtr left = parse_unary(true);
        while (skip_op("**")) left = binary("**", std::move(left), parse_unary(true), line);
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        int line = cur().line;
        ExprPtr node;
        if (is_op("-") || is_op("+")) {
            std::string op = next().text;
            node = make(ExprKind::unary, line);
            node->op = op;
            node->args.push_back(parse_unary(false));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        int line = t.line;
        if (t.type == TokenType::name) {
            next();
            auto e = make(ExprKind::literal, line);
            if (t.text == "true" || t.text == "True") {
                e->value = Value(true);
            } else if (t.text == "false" || t.text == "False") {
                e->value = Value(false);
            } else if (t.text == "none" || t.text == "None") {
                e->value = Value::none();
            } else {
                e->kind = ExprKind::name;
                e->name = t.text;
            }
            return e;
        }
        if (t.type == TokenType::string) {
            std::string s;
            while (cur().type == TokenType::string) s += next().text;  // "a" "b" concatenates
            auto e = make(ExprKind::literal, line);
            e->value = Value(std::move(s));
            return e;
        }
        if (t.type == TokenType::integer || t.type == TokenType::floating) {
            auto e = make(ExprKind::literal, line);
            e->value = t.type == TokenType::integer ? Value(t.int_value) : Value(t.float_value);
            next();
            return e;
        }
        if (is_op("(")) {
            next();
            ExprPtr inner = parse_tuple_in_parens(line);
            expect_op(")");
            return inner;
        }
        if (is_op("[")) {
            next();
            auto e = make(ExprKind::list, line);
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_expression(true));
            }
            expect_op("]");
            return e;
        }
        if (is_op("{")) {
            next();
            auto e = make(ExprKind::dict, line);
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_expression(true));
                expect_op(":");
                e->args.push_back(parse_expression(true));
            }
            expect_op("}");
            return e;
        }
        fail("unexpected '" + describe(t) + "'", line);
    }

    // `()` is an empty tuple, `(a)` is `a`, `(a,)` and `(a, b)` are tuples.
    ExprPtr parse_tuple_in_parens(int line) {
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_op(")")) break;
            items.push_back(parse_expression(true));
            if (is_op(",")) {
                is_tuple = true;
            } else {
                break;
            }
        }
        if (!is_tuple && items.size() == 1) return std::move(items[0]);
        auto e = make(ExprKind::tuple, line);
        e->args = std::move(items);
        return e;
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            if (is_op(".") || is_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        while (true) {
            if (is_op("|")) {
                node = parse_filter(std::move(node), false);
            } else if (is_name("is")) {
                node = parse_test(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        const Token& t = next();
        int line = t.line;
        if (t.text == ".") {
            const Token& attr = cur();
            if (attr.type == TokenType::name) {
                next();
                auto e = make(ExprKind::getattr, line);
                e->name = attr.text;
                e->args.push_back(std::move(node));
                return e;
            }
            if (attr.type != TokenType::integer) fail("expected name or number", attr.line);
            auto key = make(ExprKind::literal, attr.line);
            key->value = Value(attr.int_value);
            next();
            auto e = make(ExprKind::getitem, line);
            e->args.push_back(std::move(node));
            e->args.push_back(std::move(key));
            return e;
        }
        // `[` ... `]`: an index, a slice, or several (a tuple key).
        std::vector<ExprPtr> subs;
        while (!is_op("]")) {
            if (!subs.empty()) expect_op(",");
            subs.push_back(parse_subscribed(std::move(node), subs.empty()));
        }
        expect_op("]");
        if (subs.empty()) fail("expected subscript expression", line);
        if (subs.size() == 1) return std::move(subs[0]);
        fail("multiple subscripts are not supported", line);
    }

    // Returns the full getitem/slice node wrapping `subject`.
    ExprPtr parse_subscribed(ExprPtr subject, bool) {
        int line = cur().line;
        ExprPtr start, stop, step;
        if (!is_op(":")) {
            start = parse_expression(true);
            if (!is_op(":")) {
                auto e = make(ExprKind::getitem, line);
                e->args.push_back(std::move(subject));
                e->args.push_back(std::move(start));
                return e;
            }
        }
        expect_op(":");
        if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
        if (skip_op(":")) {
            if (!is_op("]") && !is_op(",")) step = parse_expression(true);
        }
        auto e = make(ExprKind::slice, line);
        e->args.push_back(std::move(subject));
        e->args.push_back(std::move(start));
        e->args.push_back(std::move(stop));
        e->args.push_back(std::move(step));
        return e;
    }

    // Parses `(args, key=value)` into `e->args` (after the callee/subject) and `e->kwargs`.
    void parse_call_args(Expr& e) {
        int line = cur().line;
        expect_op("(");
        bool need_comma = false;
        while (!is_op(")")) {
            if (need_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (is_op("*") || is_op("**")) fail("*args and **kwargs are not supported", line);
            if (cur().type == TokenType::name && look().type == TokenType::op &&
                look().text == "=") {
                std::string key = next().text;
                next();
                e.kwargs.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!e.kwargs.empty()) fail("invalid syntax for function call expression", line);
                e.args.push_back(parse_expression(true));
            }
            need_comma = true;
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto e = make(ExprKind::call, cur().line);
        e->args.push_back(std::move(callee));
        parse_call_args(*e);
        return e;
    }

    ExprPtr parse_filter(ExprPtr node, bool start_inline) {
        while (is_op("|") || start_inline) {
            if (!start_inline) next();
            start_inline = false;
            int line = cur().line;
            std::string name = expect_identifier();
            while (skip_op(".")) name += "." + expect_identifier();
            auto e = make(ExprKind::filter, line);
            e->name = name;
            e->soft = soft_ > 0;
            if (!e->soft && !is_known_filter(name)) {
                fail("No filter named '" + name + "'.", line, "TemplateAssertionError");
            }
            e->args.push_back(std::move(node));
            if (is_op("(")) parse_call_args(*e);
            node = std::move(e);
        }
        return node;
    }

    ExprPtr parse_test(ExprPtr node) {
        int line = next().line;  // `is`
        bool negated = skip_name("not");
        std::string name = expect_identifier();
        while (skip_op(".")) name += "." + expect_identifier();
        auto e = make(ExprKind::test, line);
        e->name = name;
        e->soft = soft_ > 0;
        if (!e->soft && !is_known_test(name)) {
            fail("No test named '" + name + "'.", line, "TemplateAssertionError");
        }
        e->args.push_back(std::move(node));
        if (is_op("(")) {
            parse_call_args(*e);
        } else if ((cur().type == TokenType::name || cur().type == TokenType::string ||
                    cur().type == TokenType::integer || cur().type == TokenType::floating ||
                    is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail("You cannot chain multiple tests with is", cur().line);
            e->args.push_back(parse_postfix(parse_primary()));
        }
        if (!negated) return e;
        auto n = make(ExprKind::unary, line);
        n->op = "not";
        n->args.push_back(std::move(e));
        return n;
    }

    std::vector<Token> tokens_;
    std::size_t pos_ = 0;
    int depth_ = 0;
    int soft_ = 0;  // > 0 inside `if` statements and conditional expressions
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace brigade::model::text::jinja
