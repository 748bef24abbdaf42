// Every template under ../shared/data/chat-templates rendered for every conversation of
// reference/template-expected.json must equal what Hugging Face transformers produced (or fail
// where it failed). Templates that call strftime_now rendered "today" when the reference was
// made, so the date they print is matched by a wildcard.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model/text/chat_template.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kDateMark =
    "\x01"
    "DATE"
    "\x01";

std::string escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (static_cast<unsigned char>(c) < 0x20) {
            out += "\\x" + std::to_string(static_cast<unsigned char>(c));
        } else {
            out += c;
        }
    }
    return out;
}

std::string first_difference(const std::string& want, const std::string& got) {
    std::size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    std::size_t from = i > 60 ? i - 60 : 0;
    std::ostringstream ss;
    ss << "first difference at byte " << i << " (expected " << want.size() << " bytes, got "
       << got.size() << ")\n    expected: ..." << escape(want.substr(from, 160))
       << "\n    got:      ..." << escape(got.substr(from, 160));
    return ss.str();
}

// `got` contains kDateMark where strftime_now was called; each mark matches 1-40 characters
// of `want` (no newline).
bool matches_with_dates(const std::string& want, const std::string& got) {
    std::vector<std::string> pieces;
    std::size_t start = 0;
    while (true) {
        auto at = got.find(kDateMark, start);
        pieces.push_back(
            got.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) break;
        start = at + kDateMark.size();
    }
    if (want.compare(0, pieces[0].size(), pieces[0]) != 0) return false;
    std::size_t pos = pieces[0].size();
    for (std::size_t i = 1; i < pieces.size(); ++i) {
        bool last = i + 1 == pieces.size();
        bool found = false;
        for (std::size_t len = 1; len <= 40 && pos + len <= want.size(); ++len) {
            if (want[pos + len - 1] == '\n') break;
            std::size_t next = pos + len;
            if (last) {
                if (want.size() - next == pieces[i].size() &&
                    want.compare(next, std::string::npos, pieces[i]) == 0) {
                    return true;
                }
            } else if (want.compare(next, pieces[i].size(), pieces[i]) == 0) {
                pos = next + pieces[i].size();
                found = true;
                break;
            }
        }
        if (!found) return false;
    }
    return pos == want.size();
}

TEST(ChatTemplateReference, EveryTemplateMatchesHuggingFace) {
    auto data = test::shared_data_dir();
    if (data.empty()) GTEST_SKIP() << "../shared/data is absent";
    auto reference =
        ordered_json::parse(test::read_file(data / "reference/template-expected.json"));
    const auto& tokens = reference["special_tokens"];
    ordered_json special = ordered_json::object();
    ordered_json extra_base = ordered_json::object();
    for (auto it = tokens.begin(); it != tokens.end(); ++it) {
        (it.key().ends_with("_token") ? special : extra_base)[it.key()] = it.value();
    }

    int checked = 0;
    std::vector<std::string> failures;
    for (auto t = reference["templates"].begin(); t != reference["templates"].end(); ++t) {
        const std::string& rel = t.key();
        std::string source = test::read_file(data / rel);
        bool uses_clock = source.find("strftime_now") != std::string::npos;
        auto tpl = ChatTemplate::from_source(source, special);
        for (auto c = t.value().begin(); c != t.value().end(); ++c) {
            ++checked;
            const auto& conv = reference["conversations"][c.key()];
            const auto& want = c.value();
            std::string label = rel + " / " + c.key();
            if (!tpl) {
                if (!want.contains("error"))
                    failures.push_back(label + ": parse failed: " + tpl.error().message);
                continue;
            }
            ChatTemplate ct = *tpl;
            JinjaRenderOptions options;
            options.strftime_now = [](std::string_view) { return std::string(kDateMark); };
            ct.set_render_options(options);
            ChatTemplateInputs in;
            in.messages = conv["messages"];
            if (conv.contains("tools")) in.tools = conv["tools"];
            in.add_generation_prompt = conv.value("add_generation_prompt", true);
            in.extra = extra_base;
            if (conv.contains("enable_thinking"))
                in.extra["enable_thinking"] = conv["enable_thinking"];
            in.tool_arguments = ToolArguments::as_given;  // HF received them as written
            auto got = ct.render(in);
            if (want.contains("error")) {
                if (got)
                    failures.push_back(label + ": HF raised \"" + want["error"].get<std::string>() +
                                       "\" but we rendered");
                continue;
            }
            const std::string& expected = want["rendered"].get_ref<const std::string&>();
            if (!got) {
                failures.push_back(label + ": we failed: " + got.error().message);
            } else if (uses_clock ? !matches_with_dates(expected, *got) : *got != expected) {
                failures.push_back(label + ": " + first_difference(expected, *got));
            }
        }
    }
    std::string report;
    for (const auto& f : failures) report += "  " + f + "\n";
    EXPECT_TRUE(failures.empty()) << failures.size() << " of " << checked << " renderings differ:\n"
                                  << report;
    EXPECT_GT(checked, 300);
    std::printf("[ reference ] %d renderings checked, %zu differ\n", checked, failures.size());
}

}  // namespace
}  // namespace brigade::model::text
