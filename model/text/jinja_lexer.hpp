#pragma once
// Jinja lexer: template source -> tokens, with jinja2's whitespace rules as transformers
// configures them (trim_blocks and lstrip_blocks on, keep_trailing_newline off).
//
// Mirrors jinja2/lexer.py `tokeniter`: newlines are normalised to "\n" and one trailing newline
// is dropped; `{%-`/`-%}` strip all whitespace on that side; `{%+`/`+%}` opt out of
// lstrip/trim; lstrip_blocks removes spaces and tabs between a line start and `{%` or `{#`
// (never before `{{`); trim_blocks removes the first newline after `%}` or `#}`. Inside a tag the
// end marker only counts when brackets are balanced (`{{ {'a': {}} }}`).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::model::text::jinja {

enum class TokenType : std::uint8_t {
    data,            // template text
    block_begin,     // {%
    block_end,       // %}
    variable_begin,  // {{
    variable_end,    // }}
    name,
    string,
    integer,
    floating,
    op,  // operator or punctuation, text in `text`
    eof,
};

struct Token {
    TokenType type = TokenType::eof;
    int line = 1;
    std::string text;  // data, name, decoded string literal, or operator
    std::int64_t int_value = 0;
    double float_value = 0.0;
};

// Throws TemplateException (TemplateSyntaxError) on malformed input.
std::vector<Token> tokenize(std::string_view source);

// How jinja2 names a token in syntax errors ("end of statement block", ...).
std::string describe_token(const Token& t);

}  // namespace brigade::model::text::jinja
