#pragma once
// Jinja parser: tokens -> syntax tree, following jinja2/parser.py (same precedence, same
// statement forms). Unknown filters and tests fail at parse time unless they sit inside an
// `if` or a conditional expression, where jinja2 defers the error to when they run.

#include <string_view>

#include "model/text/jinja_ast.hpp"

namespace brigade::model::text::jinja {

// Throws TemplateException (TemplateSyntaxError / TemplateAssertionError) with a line.
Body parse_template(std::string_view source);

// Names the renderer implements (used for the parse-time check above).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace brigade::model::text::jinja
