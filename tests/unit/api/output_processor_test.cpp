#include "api/output_processor.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace brigade::api {
namespace {

struct Result {
    Delta total;
    bool stopped = false;
    int n_calls = 0;
};

Result run(OutputOptions options, const std::string& text, unsigned seed) {
    OutputProcessor processor(std::move(options));
    std::mt19937 rng(seed);
    Result result;
    std::size_t at = 0;
    while (at < text.size() && !result.stopped) {
        const std::size_t n = std::min<std::size_t>(1 + rng() % 6, text.size() - at);
        Delta delta;
        result.stopped = processor.feed(std::string_view(text).substr(at, n), delta);
        result.total.content += delta.content;
        result.total.reasoning += delta.reasoning;
        for (auto& call : delta.tool_calls) result.total.tool_calls.push_back(call);
        at += n;
    }
    Delta tail;
    processor.finish(tail);
    result.total.content += tail.content;
    result.total.reasoning += tail.reasoning;
    for (auto& call : tail.tool_calls) result.total.tool_calls.push_back(call);
    result.n_calls = processor.n_tool_calls();
    return result;
}

TEST(OutputProcessor, ReasoningThenToolCallQwen3) {
    OutputOptions options;
    options.tool_format = ToolCallFormat::hermes;
    options.parse_reasoning = true;
    const std::string text =
        "<think>\nNeed weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    for (unsigned seed = 0; seed < 100; ++seed) {
        const Result r = run(options, text, seed);
        EXPECT_EQ(r.total.reasoning, "Need weather.");
        EXPECT_EQ(r.total.content, "");
        ASSERT_EQ(r.n_calls, 1);
        std::string arguments;
        for (const auto& call : r.total.tool_calls) arguments += call.arguments;
        EXPECT_EQ(nlohmann::json::parse(arguments), nlohmann::json({{"city", "Paris"}}));
        EXPECT_EQ(r.total.tool_calls.front().name, "get_weather");
    }
}

TEST(OutputProcessor, StopStringAppliesBeforeEverythingElse) {
    OutputOptions options;
    options.stop = {"<|im_end|>", "Observation:"};
    options.parse_reasoning = true;
    for (unsigned seed = 0; seed < 100; ++seed) {
        const Result r =
            run(options, "<think>hm</think>Action: search\nObservation: more text", seed);
        EXPECT_TRUE(r.stopped);
        EXPECT_EQ(r.total.reasoning, "hm");
        EXPECT_EQ(r.total.content, "Action: search\n");
    }
}

TEST(OutputProcessor, FinishReason) {
    OutputOptions options;
    options.tool_format = ToolCallFormat::mistral;
    OutputProcessor processor(options);
    Delta delta;
    processor.feed("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", delta);
    EXPECT_EQ(processor.finish_reason(false), FinishReason::tool_calls);
    EXPECT_EQ(processor.finish_reason(true), FinishReason::length);
    OutputProcessor plain(OutputOptions{});
    EXPECT_EQ(plain.finish_reason(false), FinishReason::stop);
}

TEST(OutputProcessor, TemplateOpenedThinking) {
    OutputOptions options;
    options.starts_in_reasoning = true;
    const Result r = run(options, "Paris is the capital.\n</think>\n\nParis.", 1);
    EXPECT_EQ(r.total.reasoning, "Paris is the capital.");
    EXPECT_EQ(r.total.content, "Paris.");
}

}  // namespace
}  // namespace brigade::api
