#pragma once
// Internal to the Jinja parser: tokens -> expression trees, with jinja2's precedence
// (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filters).

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/jinja_ast.hpp"
#include "model/text/jinja_lexer.hpp"
#include "model/text/jinja_parser.hpp"

namespace brigade::model::text::jinja {

// Deeper nesting than this is refused: real templates nest a dozen levels, and a hostile one
// must not exhaust the stack.
inline constexpr int kMaxNesting = 256;

[[noreturn]] inline void fail(std::string message, int line,
                              std::string kind = "TemplateSyntaxError") {
    throw TemplateException{std::move(kind), std::move(message), line};
}

// The expression half of the parser (jinja2/parser.py parse_expression and below); the
// statement half in jinja_parser.cpp derives from it.
class ExprParser {
public:
    explicit ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

protected:
    struct DepthGuard {
        explicit DepthGuard(ExprParser& p) : p_(p) {
            if (++p_.depth_ > kMaxNesting) fail("template nesting too deep", p_.cur().line);
        }
        ~DepthGuard() { --p_.depth_; }
        ExprParser& p_;
    };

    // Left-associative chains (`a + b + c`, `x.a.b`, `x | f | g`) are parsed by loops but nest
    // in the tree; each link counts as one level so evaluation depth stays bounded too.
    struct ChainGuard {
        explicit ChainGuard(ExprParser& p) : p_(p) {}
        ~ChainGuard() { p_.depth_ -= added_; }
        void deepen() {
            ++added_;
            if (++p_.depth_ > kMaxNesting) fail("template nesting too deep", p_.cur().line);
        }
        ExprParser& p_;
        int added_ = 0;
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
            fail("expected token '" + std::string(op) + "', got '" + describe_token(cur()) + "'",
                 cur().line);
        }
    }
    void expect_name(std::string_view name) {
        if (!skip_name(name)) {
            fail("expected token '" + std::string(name) + "', got '" + describe_token(cur()) + "'",
                 cur().line);
        }
    }
    std::string expect_identifier() {
        if (cur().type != TokenType::name) {
            fail("expected token 'name', got '" + describe_token(cur()) + "'", cur().line);
        }
        return next().text;
    }
    void expect_block_end() {
        if (cur().type != TokenType::block_end) {
            fail("expected token 'end of statement block', got '" + describe_token(cur()) + "'",
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
                fail("Expected an expression, got '" + describe_token(cur()) + "'", cur().line);
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
        ChainGuard chain(*this);
        while (is_name("if")) {
            chain.deepen();
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
        ChainGuard chain(*this);
        while (skip_name("or")) {
            chain.deepen();
            left = binary("or", std::move(left), parse_and(), line);
        }
        return left;
    }

    ExprPtr parse_and() {
        int line = cur().line;
        ExprPtr left = parse_not();
        ChainGuard chain(*this);
        while (skip_name("and")) {
            chain.deepen();
            left = binary("and", std::move(left), parse_not(), line);
        }
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
        ChainGuard chain(*this);
        while (is_op("+") || is_op("-")) {
            chain.deepen();
            std::string op = next().text;
            left = binary(op, std::move(left), parse_concat(), line);
        }
        return left;
    }

    ExprPtr parse_concat() {
        int line = cur().line;
        ExprPtr left = parse_math2();
        ChainGuard chain(*this);
        while (skip_op("~")) {
            chain.deepen();
            left = binary("~", std::move(left), parse_math2(), line);
        }
        return left;
    }

    ExprPtr parse_math2() {
        int line = cur().line;
        ExprPtr left = parse_pow();
        ChainGuard chain(*this);
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            chain.deepen();
            std::string op = next().text;
            left = binary(op, std::move(left), parse_pow(), line);
        }
        return left;
    }

    ExprPtr parse_pow() {
        int line = cur().line;
        ExprPtr left = parse_unary(true);
        ChainGuard chain(*this);
        while (skip_op("**")) {
            chain.deepen();
            left = binary("**", std::move(left), parse_unary(true), line);
        }
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
        fail("unexpected '" + describe_token(t) + "'", line);
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
        ChainGuard chain(*this);
        while (true) {
            chain.deepen();
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
        ChainGuard chain(*this);
        while (true) {
            chain.deepen();
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
        ChainGuard chain(*this);
        while (is_op("|") || start_inline) {
            chain.deepen();
            if (!start_inline) next();
            start_inline = false;
            int line = cur().line;
            std::string name = expect_identifier();
            while (skip_op(".")) name.append(".").append(expect_identifier());
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

}  // namespace brigade::model::text::jinja
