#include "api/reasoning_splitter.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/support/test_support.hpp"

namespace brigade::api {
namespace {

SplitText split_in_pieces(const std::string& text, const std::vector<std::size_t>& cuts,
                          ReasoningOptions options = {}) {
    ReasoningSplitter splitter(options);
    SplitText out;
    std::size_t begin = 0;
    for (std::size_t cut : cuts) {
        splitter.feed(std::string_view(text).substr(begin, cut - begin), out);
        begin = cut;
    }
    splitter.feed(std::string_view(text).substr(begin), out);
    splitter.flush(out);
    return out;
}

TEST(ReasoningSplitter, Qwen3StyleThinkBlock) {
    const SplitText out = split_in_pieces("<think>\nThe user wants 2+2.\n</think>\n\nIt is 4.", {});
    EXPECT_EQ(out.reasoning, "The user wants 2+2.");
    EXPECT_EQ(out.content, "It is 4.");
}

TEST(ReasoningSplitter, EverySplitOfTheTagsGivesTheSameResult) {
    const std::string text = "  <think>\nstep 1, step 2\n</think>\n\nAnswer: <b>yes</b>";
    for (std::size_t a = 0; a <= text.size(); ++a) {
        for (std::size_t b = a; b <= text.size(); b += 3) {
            const SplitText out = split_in_pieces(text, {a, b});
            EXPECT_EQ(out.reasoning, "step 1, step 2") << a << "," << b;
            EXPECT_EQ(out.content, "Answer: <b>yes</b>") << a << "," << b;
        }
    }
}

TEST(ReasoningSplitter, NoThinkBlockIsAllContent) {
    for (std::size_t a = 0; a <= 12; ++a) {
        const SplitText out = split_in_pieces("<thin>k not a tag", {a});
        EXPECT_EQ(out.content, "<thin>k not a tag");
        EXPECT_EQ(out.reasoning, "");
    }
}

TEST(ReasoningSplitter, ThinkLaterInTheTextIsContent) {
    const SplitText out = split_in_pieces("Use <think> tags like this: <think>x</think>", {5});
    EXPECT_EQ(out.content, "Use <think> tags like this: <think>x</think>");
}

TEST(ReasoningSplitter, TemplateAlreadyOpenedThink) {
    ReasoningOptions options;
    options.starts_in_reasoning = true;
    std::mt19937 rng(7);
    const std::string text = "\nHmm, France.\n</think>\n\nParis.";
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<std::size_t> cuts;
        for (std::size_t i = 1; i < text.size(); ++i) {
            if (rng() % 4 == 0) cuts.push_back(i);
        }
        const SplitText out = split_in_pieces(text, cuts, options);
        EXPECT_EQ(out.reasoning, "Hmm, France.");
        EXPECT_EQ(out.content, "Paris.");
    }
}

TEST(ReasoningSplitter, UnclosedReasoningStaysReasoning) {
    const SplitText out = split_in_pieces("<think>cut off by max_tokens </thi", {9});
    EXPECT_EQ(out.reasoning, "cut off by max_tokens </thi");
    EXPECT_EQ(out.content, "");
}

TEST(ReasoningSplitter, EmptyThinkBlock) {
    const SplitText out = split_in_pieces("<think>\n\n</think>\n\nHi", {3, 11});
    EXPECT_EQ(out.reasoning, "");
    EXPECT_EQ(out.content, "Hi");
}

TEST(ReasoningSplitter, InReasoningTracksState) {
    ReasoningSplitter splitter;
    SplitText out;
    EXPECT_FALSE(splitter.in_reasoning());
    splitter.feed("<think>a", out);
    EXPECT_TRUE(splitter.in_reasoning());
    splitter.feed("</think>b", out);
    EXPECT_FALSE(splitter.in_reasoning());
}

TEST(PromptOpensReasoning, Basics) {
    EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>\n"));
    EXPECT_TRUE(prompt_opens_reasoning("<|assistant|><think>"));
    EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
    EXPECT_FALSE(prompt_opens_reasoning("<think>\nold</think> then <think> text"));
}

// Generation prompts rendered by transformers for real templates: those that end inside an
// opened <think> block (DeepSeek-R1 distills, GLM-4.7, Qwen3.5, …) must be detected, and
// Qwen3's enable_thinking=false prompt (an empty closed block) must not.
TEST(PromptOpensReasoning, RealRenderedPrompts) {
    const auto data = test::shared_data_dir();
    if (data.empty()) GTEST_SKIP() << "shared data not found";
    std::ifstream file(data / "reference" / "template-expected.json");
    ASSERT_TRUE(file) << "reference/template-expected.json missing";
    const nlohmann::json expected = nlohmann::json::parse(file);
    int opened = 0, checked = 0;
    for (const auto& [name, conversations] : expected["templates"].items()) {
        for (const auto& [conversation, result] : conversations.items()) {
            if (!result.contains("rendered")) continue;
            const std::string prompt = result["rendered"];
            std::string trimmed = prompt;
            while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) {
                trimmed.pop_back();
            }
            const bool ends_open = trimmed.ends_with("<think>");
            EXPECT_EQ(prompt_opens_reasoning(prompt), ends_open) << name << " " << conversation;
            opened += ends_open ? 1 : 0;
            ++checked;
        }
    }
    EXPECT_GE(opened, 10);
    EXPECT_GE(checked, 100);
    const auto& templates = expected["templates"];
    auto rendered = [&](const char* name, const char* conversation) {
        return templates[std::string("chat-templates/llama.cpp/") + name][conversation]["rendered"]
            .get<std::string>();
    };
    EXPECT_FALSE(prompt_opens_reasoning(rendered("Qwen-Qwen3-0.6B.jinja", "thinking_off")));
    EXPECT_FALSE(prompt_opens_reasoning(rendered("Qwen-Qwen3-0.6B.jinja", "single_user")));
    EXPECT_TRUE(prompt_opens_reasoning(
        rendered("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "single_user")));
    EXPECT_TRUE(prompt_opens_reasoning(rendered("GLM-4.7-Flash.jinja", "single_user")));
    EXPECT_FALSE(
        prompt_opens_reasoning(rendered("meta-llama-Llama-3.1-8B-Instruct.jinja", "single_user")));
}

}  // namespace
}  // namespace brigade::api
