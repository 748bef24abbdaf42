// Jinja interpreter vs Python jinja2, case by case: whitespace control, literals and printing,
// operators, subscripts and slices, undefined semantics, tests, loops, set/namespace scoping,
// macros and call blocks, filters, tojson, str/dict/list methods, globals, syntax errors.
//
// The expected outputs were produced by Python jinja2 3.1.6 configured exactly as
// transformers does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// the `generation` tag, HF's tojson, raise_exception, strftime_now fixed to "21 Nov 2026"),
// by tests/unit/text/jinja_parity_cases.py. Regenerate with:
//   python3 tests/unit/text/jinja_parity_cases.py > tests/fixtures/jinja/python_parity.json
// An "error" entry names the Python exception; we must fail too (same kind where we model it),
// and syntax errors must carry jinja2's line number.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/text/jinja.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

std::string show(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

TEST(JinjaPythonParity, EveryCaseMatchesJinja2) {
    auto cases = nlohmann::ordered_json::parse(
        test::read_file(test::source_dir() / "tests/fixtures/jinja/python_parity.json"));
    ASSERT_GT(cases.size(), 100u);
    JinjaRenderOptions options;
    options.strftime_now = [](std::string_view) { return std::string("21 Nov 2026"); };
    int n = 0;
    for (const auto& c : cases) {
        ++n;
        const std::string tpl = c["template"].get<std::string>();
        SCOPED_TRACE("case " + std::to_string(n) + " [" + c["group"].get<std::string>() +
                     "]: " + show(tpl));
        auto parsed = JinjaTemplate::parse(tpl);
        Result<std::string> got =
            parsed ? parsed->render(c["context"], options) : Result<std::string>(parsed.error());
        if (c.contains("rendered")) {
            ASSERT_TRUE(got.has_value()) << got.error().message;
            EXPECT_EQ(*got, c["rendered"].get<std::string>());
            continue;
        }
        std::string kind = c["error"].get<std::string>();
        ASSERT_FALSE(got.has_value())
            << "jinja2 raised " << kind << " but we rendered: " << show(*got);
        const std::string& message = got.error().message;
        EXPECT_EQ(got.error().code, errc::template_error);
        // TemplateAssertionError (unknown filter) is a syntax-time error in both.
        EXPECT_NE(message.find(kind), std::string::npos) << "want " << kind << ", got: " << message;
        if (c.contains("line") && !c["line"].is_null()) {
            std::string line = "line " + std::to_string(c["line"].get<int>()) + ":";
            EXPECT_NE(message.find(line), std::string::npos)
                << "want " << line << " in: " << message;
        }
    }
}

}  // namespace
}  // namespace brigade::model::text
