#include "api/tool_call_parser.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tests/support/test_support.hpp"

namespace brigade::api {
namespace {

using nlohmann::json;

struct Assembled {
    std::string content;
    std::vector<std::string> ids;
    std::vector<std::string> names;
    std::vector<std::string> arguments;
    std::vector<int> fragments;  // deltas per call
};

ToolCallIdGenerator counting_ids() {
    auto n = std::make_shared<int>(0);
    return [n] { return "id" + std::to_string((*n)++); };
}

// Feeds `text` in pieces cut at `cuts`, checks the delta protocol and assembles the result.
Assembled parse(ToolCallFormat format, const std::string& text,
                const std::vector<std::size_t>& cuts) {
    auto parser = make_tool_call_parser(format, counting_ids());
    Assembled out;
    auto absorb = [&](ToolParseOutput& piece) {
        out.content += piece.content;
        for (const auto& delta : piece.tool_calls) {
            const auto index = static_cast<std::size_t>(delta.index);
            if (index == out.ids.size()) {
                // The first fragment of a call names it.
                EXPECT_FALSE(delta.id.empty());
                EXPECT_FALSE(delta.name.empty());
                out.ids.push_back(delta.id);
                out.names.push_back(delta.name);
                out.arguments.emplace_back();
                out.fragments.push_back(0);
            } else {
                EXPECT_LT(index, out.ids.size()) << "call index skipped";
                EXPECT_TRUE(delta.id.empty()) << "a call was named twice";
            }
            if (index < out.arguments.size()) {
                out.arguments[index] += delta.arguments;
                ++out.fragments[index];
            }
        }
        piece = {};
    };
    ToolParseOutput piece;
    std::size_t begin = 0;
    for (std::size_t cut : cuts) {
        parser->feed(std::string_view(text).substr(begin, cut - begin), piece);
        absorb(piece);
        begin = cut;
    }
    parser->feed(std::string_view(text).substr(begin), piece);
    absorb(piece);
    parser->flush(piece);
    absorb(piece);
    EXPECT_EQ(parser->n_calls(), static_cast<int>(out.ids.size()));
    return out;
}

std::vector<std::size_t> random_cuts(std::mt19937& rng, std::size_t size) {
    std::vector<std::size_t> cuts;
    std::size_t at = 0;
    for (;;) {
        at += 1 + rng() % 7;  // tokens of 1..7 bytes
        if (at >= size) break;
        cuts.push_back(at);
    }
    return cuts;
}

struct Case {
    ToolCallFormat format;
    std::string text;
    std::string content;
    std::vector<std::string> names;
    std::vector<json> arguments;
};

void check_all_splits(const Case& c) {
    std::mt19937 rng(42);
    for (int trial = 0; trial < 300; ++trial) {
        const auto cuts = trial == 0 ? std::vector<std::size_t>{} : random_cuts(rng, c.text.size());
        const Assembled out = parse(c.format, c.text, cuts);
        ASSERT_EQ(out.content, c.content) << "trial " << trial;
        ASSERT_EQ(out.names, c.names) << "trial " << trial;
        ASSERT_EQ(out.arguments.size(), c.arguments.size());
        for (std::size_t i = 0; i < c.arguments.size(); ++i) {
            const json parsed = json::parse(out.arguments[i], nullptr, false);
            ASSERT_FALSE(parsed.is_discarded()) << out.arguments[i];
            EXPECT_EQ(parsed, c.arguments[i]) << "trial " << trial;
        }
    }
}

TEST(HermesToolCalls, QwenSingleCall) {
    check_all_splits(
        {ToolCallFormat::hermes,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
         "\"unit\": \"c\"}}\n</tool_call>",
         "",
         {"get_weather"},
         {json{{"city", "Paris"}, {"unit", "c"}}}});
}

TEST(HermesToolCalls, ContentThenTwoCalls) {
    check_all_splits(
        {ToolCallFormat::hermes,
         "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": "
         "\"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n"
         "</tool_call>",
         "Let me check both.\n",
         {"a", "b"},
         {json{{"x", json::array({1, json{{"y", "}"}}})}}, json::object()}});
}

TEST(HermesToolCalls, ArgumentsAsStringAndNameLast) {
    check_all_splits({ToolCallFormat::hermes,
                      "<tool_call>{\"arguments\": \"{\\\"q\\\": \\\"x\\\"}\", \"name\": \"search\"}"
                      "</tool_call>",
                      "",
                      {"search"},
                      {json{{"q", "x"}}}});
}

TEST(HermesToolCalls, ArgumentsStreamInSeveralFragments) {
    const std::string text = "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"" +
                             std::string(200, 'z') + "\"}}\n</tool_call>";
    std::vector<std::size_t> cuts;
    for (std::size_t i = 10; i < text.size(); i += 10) cuts.push_back(i);
    const Assembled out = parse(ToolCallFormat::hermes, text, cuts);
    ASSERT_EQ(out.names.size(), 1u);
    EXPECT_GT(out.fragments[0], 10) << "arguments should stream, not arrive at the end";
}

TEST(HermesToolCalls, NotJsonIsContent) {
    check_all_splits({ToolCallFormat::hermes,
                      "Use <tool_call> tags to call tools.",
                      "Use <tool_call> tags to call tools.",
                      {},
                      {}});
}

TEST(HermesToolCalls, JsonWithoutNameIsContent) {
    check_all_splits({ToolCallFormat::hermes,
                      "<tool_call>{\"foo\": 1}</tool_call>",
                      "<tool_call>{\"foo\": 1}</tool_call>",
                      {},
                      {}});
}

TEST(HermesToolCalls, TruncatedCallBeforeNameIsContent) {
    const Assembled out = parse(ToolCallFormat::hermes, "<tool_call>\n{\"na", {4});
    EXPECT_EQ(out.content, "<tool_call>{\"na");
    EXPECT_TRUE(out.names.empty());
}

TEST(Llama3ToolCalls, JsonCall) {
    check_all_splits({ToolCallFormat::llama3,
                      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                      "",
                      {"get_weather"},
                      {json{{"city", "Paris"}}}});
}

TEST(Llama3ToolCalls, PythonTagAndSeveralCalls) {
    check_all_splits({ToolCallFormat::llama3,
                      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"type\": "
                      "\"function\", \"name\": \"b\", \"parameters\": {\"s\": \"x;y\"}}",
                      "",
                      {"a", "b"},
                      {json{{"n", 1}}, json{{"s", "x;y"}}}});
}

TEST(Llama3ToolCalls, PlainAnswerIsContent) {
    check_all_splits({ToolCallFormat::llama3,
                      "The weather in Paris is 21 °C.",
                      "The weather in Paris is 21 °C.",
                      {},
                      {}});
}

TEST(Llama3ToolCalls, JsonAnswerIsContent) {
    check_all_splits({ToolCallFormat::llama3,
                      "{\"answer\": 42, \"name\": \"x\"}",
                      "{\"answer\": 42, \"name\": \"x\"}",
                      {},
                      {}});
}

TEST(MistralToolCalls, ArrayForm) {
    check_all_splits({ToolCallFormat::mistral,
                      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
                      "",
                      {"get_weather", "get_time"},
                      {json{{"city", "Paris"}}, json{{"tz", "CET"}}}});
}

TEST(MistralToolCalls, NewerNameArgsForm) {
    check_all_splits({ToolCallFormat::mistral,
                      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time"
                      "[ARGS]{\"tz\": \"CET\"}",
                      "",
                      {"get_weather", "get_time"},
                      {json{{"city", "Paris"}}, json{{"tz", "CET"}}}});
}

TEST(MistralToolCalls, CallIdForm) {
    const Assembled out =
        parse(ToolCallFormat::mistral, "[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{\"a\": 1}", {5, 20});
    ASSERT_EQ(out.names.size(), 1u);
    EXPECT_EQ(out.names[0], "f");
    EXPECT_EQ(out.ids[0], "abc123XYZ");
    EXPECT_EQ(json::parse(out.arguments[0]), json({{"a", 1}}));
}

TEST(MistralToolCalls, ContentBeforeCalls) {
    check_all_splits({ToolCallFormat::mistral,
                      "Sure. [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
                      "Sure. ",
                      {"f"},
                      {json::object()}});
}

TEST(ToolCallIds, MistralIdsAreNineAlphanumerics) {
    auto mistral = make_tool_call_id_generator(ToolCallFormat::mistral, 1);
    auto other = make_tool_call_id_generator(ToolCallFormat::hermes, 1);
    const std::string a = mistral(), b = mistral();
    EXPECT_EQ(a.size(), 9u);
    EXPECT_NE(a, b);
    for (char c : a) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
    EXPECT_TRUE(other().starts_with("call_"));
}

TEST(ToolCallFormats, Names) {
    EXPECT_EQ(tool_call_format_from_name("qwen"), ToolCallFormat::hermes);
    EXPECT_EQ(tool_call_format_from_name("mistral"), ToolCallFormat::mistral);
    EXPECT_FALSE(tool_call_format_from_name("bogus"));
    EXPECT_EQ(tool_call_format_name(ToolCallFormat::llama3), "llama3");
}

// The templates of real models say which format their model emits.
TEST(ToolCallFormats, DetectedFromRealTemplates) {
    const auto data = test::shared_data_dir();
    if (data.empty()) GTEST_SKIP() << "shared data not found";
    const auto dir = data / "chat-templates";
    const std::vector<std::pair<std::string, ToolCallFormat>> expected = {
        {"llama.cpp/Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::hermes},
        {"llama.cpp/Qwen-Qwen3-0.6B.jinja", ToolCallFormat::hermes},
        {"llama.cpp/Qwen-QwQ-32B.jinja", ToolCallFormat::hermes},
        {"llama.cpp/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::hermes},
        {"llama.cpp/meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::llama3},
        {"llama.cpp/meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::llama3},
        {"llama.cpp/mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::mistral},
        {"llama.cpp/Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::mistral},
        {"mistral-common/v3.jinja", ToolCallFormat::mistral},
        {"llama.cpp/google-gemma-2-2b-it.jinja", ToolCallFormat::none},
        {"llama.cpp/microsoft-Phi-3.5-mini-instruct.jinja", ToolCallFormat::none},
    };
    for (const auto& [file, format] : expected) {
        const std::string source = test::read_file(dir / file);
        ASSERT_FALSE(source.empty()) << file;
        EXPECT_EQ(detect_tool_call_format(source), format) << file;
    }
}

}  // namespace
}  // namespace brigade::api
