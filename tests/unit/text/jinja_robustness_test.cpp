// Hostile and broken templates: every failure is a Result error with a line, never a crash,
// a hang or unbounded memory. Also: error line numbers, concurrent rendering, and a seeded
// mutation loop over real templates (the libFuzzer target does the same at scale).

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/text/jinja.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(std::string_view source,
                           const ordered_json& ctx = ordered_json::object(),
                           JinjaRenderOptions options = {}) {
    auto tpl = JinjaTemplate::parse(source);
    if (!tpl) return tpl.error();
    return tpl->render(ctx, options);
}

std::string repeat(std::string_view s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

TEST(JinjaRobustness, DeepNestingIsRefusedNotCrashed) {
    for (const std::string& src : {
             "{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}",
             "{{ " + repeat("[", 100000) + repeat("]", 100000) + " }}",
             "{{ " + repeat("-", 100000) + "1 }}",
             "{{ " + repeat("not ", 100000) + "x }}",
             repeat("{% if true %}", 50000),
             repeat("{% for x in y %}", 50000),
             "{{ x" + repeat(".a", 100000) + " }}",
             "{{ x" + repeat("|trim", 100000) + " }}",
         }) {
        auto r = render(src);
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error().code, errc::template_error);
        EXPECT_NE(r.error().message.find("line"), std::string::npos) << r.error().message;
    }
}

TEST(JinjaRobustness, DeepValuesAreRefusedNotCrashed) {
    std::string deep = repeat("[", 100000) + repeat("]", 100000);
    auto ctx = ordered_json::parse("{\"x\": " + deep + "}");
    auto from_json = render("{{ x | length }}", ctx);
    ASSERT_FALSE(from_json.has_value());
    EXPECT_NE(from_json.error().message.find("nested deeper"), std::string::npos)
        << from_json.error().message;

    auto grown = render(
        "{% set ns = namespace(x=[]) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}"
        "{% endfor %}{{ ns.x | length }}");
    ASSERT_FALSE(grown.has_value());
    EXPECT_NE(grown.error().message.find("RecursionError"), std::string::npos)
        << grown.error().message;

    auto chained = render(
        "{% set ns = namespace(n=namespace()) %}{% for i in range(50000) %}"
        "{% set ns.n = namespace(n=ns.n) %}{% endfor %}x");
    ASSERT_FALSE(chained.has_value());

    auto cycle =
        render("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self.self is defined }}");
    ASSERT_TRUE(cycle.has_value()) << cycle.error().message;  // freed at the end of the render
    EXPECT_EQ(*cycle, "True");

    // 300 levels are fine (well within what real data needs).
    auto ok = render("{{ x | tojson | length }}",
                     ordered_json::parse("{\"x\": " + repeat("[", 300) + repeat("]", 300) + "}"));
    ASSERT_TRUE(ok.has_value()) << ok.error().message;
    EXPECT_EQ(*ok, "600");
}

TEST(JinjaRobustness, RunawayRecursionStops) {
    auto r = render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message.find("RecursionError"), std::string::npos) << r.error().message;
    auto loop = render("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}");
    ASSERT_FALSE(loop.has_value());
    EXPECT_NE(loop.error().message.find("RecursionError"), std::string::npos);
}

TEST(JinjaRobustness, OutputAndWorkAreBounded) {
    JinjaRenderOptions small;
    small.max_output_bytes = 1 << 20;
    auto big = render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", {}, small);
    ASSERT_FALSE(big.has_value());
    EXPECT_NE(big.error().message.find("exceeds"), std::string::npos) << big.error().message;

    auto huge_string = render("{{ 'x' * 1000000000000 }}");
    ASSERT_FALSE(huge_string.has_value());

    auto doubling = render(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}{{ ns.s | length }}");
    ASSERT_FALSE(doubling.has_value());

    JinjaRenderOptions few_steps;
    few_steps.max_steps = 100000;
    auto spin =
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               {}, few_steps);
    ASSERT_FALSE(spin.has_value());
    EXPECT_NE(spin.error().message.find("step budget"), std::string::npos);

    auto range = render("{{ range(1000000) | length }}");
    ASSERT_FALSE(range.has_value());
    EXPECT_NE(range.error().message.find("OverflowError"), std::string::npos);

    auto overflow = render("{{ 9223372036854775807 + 1 }}");
    ASSERT_FALSE(overflow.has_value());
    EXPECT_NE(overflow.error().message.find("OverflowError"), std::string::npos);
}

TEST(JinjaRobustness, ErrorsNameTheTemplateLine) {
    auto syntax = render("line 1\n{% if x %}\nline 3\n{{ 1 + }}\n{% endif %}");
    ASSERT_FALSE(syntax.has_value());
    EXPECT_NE(syntax.error().message.find("line 4:"), std::string::npos) << syntax.error().message;

    auto runtime = render("a\nb\n{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}",
                          ordered_json::parse(R"({"messages": [{"content": "x"}]})"));
    ASSERT_FALSE(runtime.has_value());
    EXPECT_NE(runtime.error().message.find("line 4:"), std::string::npos)
        << runtime.error().message;
    EXPECT_NE(runtime.error().message.find("TypeError"), std::string::npos);

    auto raised = render("\n\n{{ raise_exception('Conversation roles must alternate') }}");
    ASSERT_FALSE(raised.has_value());
    EXPECT_NE(raised.error().message.find("line 3:"), std::string::npos);
    EXPECT_NE(raised.error().message.find("Conversation roles must alternate"), std::string::npos);

    auto unknown = render("{{ x }}\n{% endfor %}");
    ASSERT_FALSE(unknown.has_value());
    EXPECT_NE(unknown.error().message.find("line 2:"), std::string::npos);
}

TEST(JinjaRobustness, RejectsNonObjectContext) {
    auto tpl = JinjaTemplate::parse("x");
    ASSERT_TRUE(tpl.has_value());
    EXPECT_FALSE(tpl->render(ordered_json::array()).has_value());
    EXPECT_EQ(*tpl->render(nullptr), "x");
}

TEST(JinjaRobustness, ConcurrentRendersOfOneTemplateAgree) {
    auto tpl = JinjaTemplate::parse(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ m.role }}:{{ m.content | upper }};{% endfor %}{{ ns.n }}{{ messages | tojson }}");
    ASSERT_TRUE(tpl.has_value());
    auto ctx = ordered_json::parse(
        R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})");
    auto want = tpl->render(ctx);
    ASSERT_TRUE(want.has_value());
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 200; ++i) {
                auto got = tpl->render(ctx);
                if (!got || *got != *want) ++mismatches[static_cast<std::size_t>(t)];
            }
        });
    }
    for (auto& th : threads) th.join();
    for (int m : mismatches) EXPECT_EQ(m, 0);
}

// Mutations of real templates (byte flips, truncations, splices) must parse or fail cleanly,
// and render or fail cleanly.
TEST(JinjaRobustness, MutatedRealTemplatesNeverCrash) {
    auto data = test::shared_data_dir();
    if (data.empty()) GTEST_SKIP() << "../shared/data is absent";
    std::vector<std::string> sources;
    for (const auto& entry :
         std::filesystem::directory_iterator(data / "chat-templates/llama.cpp")) {
        if (entry.path().extension() == ".jinja") sources.push_back(test::read_file(entry.path()));
    }
    ASSERT_FALSE(sources.empty());
    auto ctx = ordered_json::parse(R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "abcdefghi", "type": "function",
        "function": {"name": "f", "arguments": {"a": 1}}}]}], "tools": null,
        "add_generation_prompt": true, "bos_token": "<s>"})");
    std::mt19937 rng(1234);
    const std::string alphabet = "{}%#-+()[]|.,:'\"~ \n\tabcxyz0189_=<>!*/";
    JinjaRenderOptions options;
    options.max_steps = 200000;
    options.max_output_bytes = 1 << 20;
    int parsed = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::string s = sources[rng() % sources.size()];
        int edits = 1 + static_cast<int>(rng() % 8);
        for (int e = 0; e < edits && !s.empty(); ++e) {
            std::size_t at = rng() % s.size();
            switch (rng() % 4) {
                case 0:
                    s[at] = alphabet[rng() % alphabet.size()];
                    break;
                case 1:
                    s.erase(at, 1 + rng() % 16);
                    break;
                case 2:
                    s.insert(at, 1, alphabet[rng() % alphabet.size()]);
                    break;
                default: {
                    const std::string& other = sources[rng() % sources.size()];
                    std::size_t from = rng() % other.size();
                    s.insert(at, other.substr(from, 1 + rng() % 64));
                }
            }
        }
        auto tpl = JinjaTemplate::parse(s);
        if (!tpl) {
            EXPECT_EQ(tpl.error().code, errc::template_error);
            continue;
        }
        ++parsed;
        auto out = tpl->render(ctx, options);
        if (!out) {
            EXPECT_EQ(out.error().code, errc::template_error);
        }
    }
    EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace brigade::model::text
