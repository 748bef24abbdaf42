#pragma once
// A Jinja template engine of our own, with the behaviour of Python jinja2 as Hugging Face
// transformers configures it for chat templates (formats.md §5.1):
// ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, keep_trailing_newline off,
// the loopcontrols extension, `{% generation %}` rendered as-is, `tojson` = `json.dumps(x,
// ensure_ascii=False, indent=, separators=, sort_keys=)`, globals `raise_exception` and
// `strftime_now`, and jinja2's default (lenient) `Undefined`.
//
// Not supported: template inheritance and inclusion (`extends`, `block`, `include`, `import`),
// autoescaping, and the filters `random`, `urlize`, `urlencode`, `wordwrap`, `xmlattr`,
// `filesizeformat` (none appears in chat templates). Integers are 64-bit (Python's are
// unbounded): overflow is an error rather than a big number.
//
// Usage:
//   auto tpl = JinjaTemplate::parse(source);            // syntax errors carry a line
//   auto text = tpl->render(context_json);             // render errors carry a line

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "model/errors.hpp"

namespace brigade::model::text {

namespace jinja {
struct Stmt;
}

struct JinjaRenderOptions {
    // Refuse output above this size (a hostile template must not exhaust memory).
    std::size_t max_output_bytes = std::size_t{64} << 20;
    // Nested macro calls / recursive loop levels.
    int max_call_depth = 100;
    // Statements + loop iterations + calls + filters; stops runaway loops.
    std::uint64_t max_steps = 50'000'000;
    // `strftime_now(format)`; empty = strftime on this machine's local time.
    std::function<std::string(std::string_view format)> strftime_now;
};

class JinjaTemplate {
public:
    // Parses `source`; errors are `errc::template_error` with "line N: ..." in the message.
    static Result<JinjaTemplate> parse(std::string_view source);

    // Renders with the top-level variables of `context` (a JSON object). Thread-safe: the parsed
    // tree is shared and never modified.
    Result<std::string> render(const nlohmann::ordered_json& context,
                               const JinjaRenderOptions& options = {}) const;

private:
    struct Parsed;
    explicit JinjaTemplate(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
    std::shared_ptr<const Parsed> parsed_;
};

}  // namespace brigade::model::text
