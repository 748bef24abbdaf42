#include "model/text/jinja_lexer.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "model/text/jinja_strings.hpp"
#include "model/text/jinja_value.hpp"

namespace brigade::model::text::jinja {

namespace {

[[noreturn]] void syntax_error(std::string message, int line) {
    throw TemplateException{"TemplateSyntaxError", std::move(message), line};
}

// "\r\n" and "\r" become "\n"; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
    std::string out;
    out.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            out += source[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Length of `s` without trailing Python whitespace (`str.rstrip()`).
std::size_t rstripped_size(std::string_view s) { return py_strip(s, false, true).size(); }

// Whether `s` is non-empty and all whitespace (jinja2's `\s+` fullmatch).
bool all_space(std::string_view s) { return !s.empty() && py_strip(s, true, false).empty(); }

bool is_name_start(unsigned char c) { return c == '_' || std::isalpha(c) || c >= 0x80; }
bool is_name_char(unsigned char c) { return is_name_start(c) || std::isdigit(c); }

class Lexer {
public:
    explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

    std::vector<Token> run() {
        while (pos_ < src_.size()) lex_root();
        push(TokenType::eof, "");
        return std::move(tokens_);
    }

private:
    enum class Tag { none, comment, block, variable };

    void push(TokenType type, std::string text) {
        Token t;
        t.type = type;
        t.line = line_;
        t.text = std::move(text);
        tokens_.push_back(std::move(t));
    }

    // Moves `pos_` to `to`, counting lines.
    void advance_to(std::size_t to) {
        for (std::size_t i = pos_; i < to; ++i) line_ += src_[i] == '\n';
        pos_ = to;
    }

    // Applies `-` stripping or lstrip_blocks to the text before a tag and emits it.
    void emit_text(std::size_t text_end, char sign, bool is_variable) {
        std::string_view text(src_.data() + pos_, text_end - pos_);
        std::size_t keep = text.size();
        if (sign == '-') {
            keep = rstripped_size(text);
        } else if (sign != '+' && !is_variable) {
            std::size_t nl = text.rfind('\n');
            std::size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
            if ((line_start > 0 || line_starting_) && all_space(text.substr(line_start))) {
                keep = line_start;
            }
        }
        if (keep > 0) {
            push(TokenType::data, std::string(text.substr(0, keep)));
        }
        advance_to(text_end);
    }

    // Consumes a tag end (`%}`, `}}`, `#}`) at `pos_` if there is one. `-` eats all following
    // whitespace; plain `%}`/`#}` eat one newline (trim_blocks); `+` keeps everything.
    bool try_end(std::string_view closer, bool trim) {
        std::string_view rest(src_.data() + pos_, src_.size() - pos_);
        std::size_t end = 0;
        if (rest.substr(0, 1) == "-" && rest.substr(1, closer.size()) == closer) {
            end = 1 + closer.size();
            while (end < rest.size() && is_ascii_space(rest[end])) ++end;
        } else if (trim && rest.substr(0, 1) == "+" && rest.substr(1, closer.size()) == closer) {
            end = 1 + closer.size();
        } else if (rest.substr(0, closer.size()) == closer) {
            end = closer.size();
            if (trim && end < rest.size() && rest[end] == '\n') ++end;
        } else {
            return false;
        }
        line_starting_ = rest[end - 1] == '\n';
        advance_to(pos_ + end);
        return true;
    }

    void lex_root() {
        // Find the next tag opener.
        std::size_t at = pos_;
        Tag tag = Tag::none;
        while (true) {
            at = src_.find('{', at);
            if (at == std::string::npos || at + 1 >= src_.size()) break;
            char c = src_[at + 1];
            if (c == '{') tag = Tag::variable;
            if (c == '%') tag = Tag::block;
            if (c == '#') tag = Tag::comment;
            if (tag != Tag::none) break;
            ++at;
        }
        if (tag == Tag::none) {  // the rest is text
            push(TokenType::data, src_.substr(pos_));
            advance_to(src_.size());
            return;
        }
        std::size_t after = at + 2;
        char sign =
            after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : '\0';
        if (tag == Tag::block && try_raw(at, after + (sign ? 1 : 0), sign)) return;
        emit_text(at, sign, tag == Tag::variable);
        advance_to(after + (sign ? 1 : 0));
        switch (tag) {
            case Tag::comment:
                lex_comment();
                break;
            case Tag::block:
                push(TokenType::block_begin, "{%");
                lex_tag("%}", TokenType::block_end, true);
                break;
            case Tag::variable:
                push(TokenType::variable_begin, "{{");
                lex_tag("}}", TokenType::variable_end, false);
                break;
            case Tag::none:
                break;
        }
    }

    // `{% raw %}...{% endraw %}`: the body is text, tags inside are not interpreted.
    bool try_raw(std::size_t open, std::size_t p, char sign) {
        std::size_t q = p;
        while (q < src_.size() && is_ascii_space(src_[q])) ++q;
        if (src_.compare(q, 3, "raw") != 0) return false;
        q += 3;
        if (q < src_.size() && is_name_char(static_cast<unsigned char>(src_[q]))) return false;
        while (q < src_.size() && is_ascii_space(src_[q])) ++q;
        std::size_t body_start;
        if (src_.compare(q, 3, "-%}") == 0) {
            body_start = q + 3;
            while (body_start < src_.size() && is_ascii_space(src_[body_start])) ++body_start;
        } else if (src_.compare(q, 2, "%}") == 0) {
            body_start = q + 2;
        } else {
            return false;
        }
        emit_text(open, sign, false);
        int raw_line = line_;
        advance_to(body_start);
        line_starting_ = src_[body_start - 1] == '\n';
        // Find `{%[-+]? endraw [-+]?%}`.
        std::size_t at = body_start;
        while (true) {
            at = src_.find("{%", at);
            if (at == std::string::npos) syntax_error("Missing end of raw directive", raw_line);
            std::size_t k = at + 2;
            char end_sign = k < src_.size() && (src_[k] == '-' || src_[k] == '+') ? src_[k] : '\0';
            if (end_sign) ++k;
            while (k < src_.size() && is_ascii_space(src_[k])) ++k;
            if (src_.compare(k, 6, "endraw") == 0) {
                k += 6;
                while (k < src_.size() && is_ascii_space(src_[k])) ++k;
                if (src_.compare(k, 2, "%}") == 0 || src_.compare(k, 3, "-%}") == 0 ||
                    src_.compare(k, 3, "+%}") == 0) {
                    emit_text(at, end_sign, false);
                    advance_to(k);
                    try_end("%}", true);
                    return true;
                }
            }
            at += 2;
        }
    }

    void lex_comment() {
        int start_line = line_;
        for (std::size_t p = pos_; p < src_.size(); ++p) {
            if (src_[p] != '+' && src_[p] != '-' && src_[p] != '#') continue;
            std::size_t save = pos_;
            advance_to(p);
            if (try_end("#}", true)) return;
            pos_ = save;
            line_ = start_line;
        }
        syntax_error("Missing end of comment tag", start_line);
    }

    void lex_tag(std::string_view closer, TokenType end_type, bool trim) {
        std::vector<char> brackets;
        int start_line = line_;
        while (true) {
            if (pos_ >= src_.size()) {
                syntax_error(end_type == TokenType::block_end
                                 ? "unexpected end of template, expected 'end of statement block'"
                                 : "unexpected end of template, expected 'end of print statement'",
                             start_line);
            }
            if (brackets.empty() && try_end(closer, trim)) {
                push(end_type, std::string(closer));
                return;
            }
            unsigned char c = static_cast<unsigned char>(src_[pos_]);
            if (is_ascii_space(static_cast<char>(c))) {
                advance_to(pos_ + 1);
            } else if (std::isdigit(c)) {
                lex_number();
            } else if (is_name_start(c)) {
                std::size_t end = pos_;
                while (end < src_.size() && is_name_char(static_cast<unsigned char>(src_[end]))) {
                    ++end;
                }
                push(TokenType::name, src_.substr(pos_, end - pos_));
                advance_to(end);
            } else if (c == '\'' || c == '"') {
                lex_string(static_cast<char>(c));
            } else {
                lex_operator(brackets);
            }
        }
    }

    void lex_string(char quote) {
        std::size_t p = pos_ + 1;
        while (p < src_.size() && src_[p] != quote) {
            if (src_[p] == '\\') ++p;
            ++p;
        }
        if (p >= src_.size())
            syntax_error("unexpected char '" + std::string(1, quote) + "'", line_);
        std::string body = src_.substr(pos_ + 1, p - pos_ - 1);
        int line = line_;
        std::string value;
        try {
            value = unescape_string_literal(body);
        } catch (TemplateException& e) {
            e.line = line;
            throw;
        }
        push(TokenType::string, std::move(value));
        advance_to(p + 1);
    }

    // Digits with optional `_` separators; returns the end offset.
    std::size_t digits_end(std::size_t p, int base) const {
        auto ok = [base](char c) {
            if (base == 2) return c == '0' || c == '1';
            if (base == 8) return c >= '0' && c <= '7';
            if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
            return std::isdigit(static_cast<unsigned char>(c)) != 0;
        };
        std::size_t q = p;
        while (q < src_.size()) {
            if (ok(src_[q])) {
                ++q;
            } else if (src_[q] == '_' && q + 1 < src_.size() && ok(src_[q + 1]) && q > p) {
                ++q;
            } else {
                break;
            }
        }
        return q;
    }

    void lex_number() {
        std::size_t p = pos_;
        char c1 = p + 1 < src_.size() ? static_cast<char>(std::tolower(src_[p + 1])) : '\0';
        if (src_[p] == '0' && (c1 == 'b' || c1 == 'o' || c1 == 'x')) {
            int base = c1 == 'b' ? 2 : c1 == 'o' ? 8 : 16;
            std::size_t start = p + 2;
            if (start < src_.size() && src_[start] == '_') ++start;
            std::size_t end = digits_end(start, base);
            if (end > start) {
                std::string digits;
                for (std::size_t i = start; i < end; ++i) {
                    if (src_[i] != '_') digits += src_[i];
                }
                Token t;
                t.type = TokenType::integer;
                t.line = line_;
                t.int_value = static_cast<std::int64_t>(std::stoull(digits, nullptr, base));
                tokens_.push_back(t);
                advance_to(end);
                return;
            }
        }
        std::size_t end = digits_end(p, 10);
        bool is_float = false;
        if (end + 1 < src_.size() && src_[end] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
            end = digits_end(end + 1, 10);
            is_float = true;
        }
        if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
            std::size_t q = end + 1;
            if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
                end = digits_end(q, 10);
                is_float = true;
            }
        }
        std::string text;
        for (std::size_t i = p; i < end; ++i) {
            if (src_[i] != '_') text += src_[i];
        }
        Token t;
        t.line = line_;
        if (is_float) {
            t.type = TokenType::floating;
            t.float_value = std::strtod(text.c_str(), nullptr);
        } else {
            t.type = TokenType::integer;
            errno = 0;
            unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
            if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
                syntax_error("integer literal too large", line_);
            }
            t.int_value = static_cast<std::int64_t>(v);
        }
        t.text = text;
        tokens_.push_back(std::move(t));
        advance_to(end);
    }

    void lex_operator(std::vector<char>& brackets) {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string_view rest(src_.data() + pos_, src_.size() - pos_);
        for (auto op : kTwo) {
            if (rest.substr(0, 2) == op) {
                push(TokenType::op, std::string(op));
                advance_to(pos_ + 2);
                return;
            }
        }
        char c = rest[0];
        static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
        if (kOne.find(c) == std::string_view::npos) {
            std::string shown = c >= 0x20 && c < 0x7f
                                    ? std::string(1, c)
                                    : "\\x" + std::to_string(static_cast<unsigned char>(c));
            syntax_error("unexpected char '" + shown + "' at " + std::to_string(pos_), line_);
        }
        if (c == '(' || c == '[' || c == '{') {
            brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
            if (brackets.empty()) syntax_error(std::string("unexpected '") + c + "'", line_);
            if (brackets.back() != c) {
                syntax_error(
                    std::string("unexpected '") + c + "', expected '" + brackets.back() + "'",
                    line_);
            }
            brackets.pop_back();
        }
        push(TokenType::op, std::string(1, c));
        advance_to(pos_ + 1);
    }

    std::string src_;
    std::size_t pos_ = 0;
    int line_ = 1;
    bool line_starting_ = true;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe_token(const Token& t) {
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

}  // namespace brigade::model::text::jinja
