// The chat templates of the real model directories in ../shared/data (Qwen2.5, Qwen3, Llama 3.2,
// Mistral, Gemma 2/3, DeepSeek R1, Phi-3, SmolLM3, gpt-oss, TinyLlama), loaded the way
// transformers finds them and rendered for several conversations. Expected renderings were
// produced by Python jinja2 configured as transformers does (see
// chat_template_models_cases.py beside this file; data in
// tests/fixtures/jinja/model_templates.json). On top of exact equality, each simple rendering is
// checked for structure: the user text is there and the generation prompt ends it.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/text/chat_template.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::ordered_json;

const ordered_json& expected() {
    static const ordered_json j = ordered_json::parse(
        test::read_file(test::source_dir() / "tests/fixtures/jinja/model_templates.json"));
    return j;
}

Result<std::string> render(const ChatTemplate& ct, const ordered_json& conv, ToolArguments mode) {
    ChatTemplateInputs in;
    in.messages = conv["messages"];
    if (conv.contains("tools")) in.tools = conv["tools"];
    in.add_generation_prompt = conv.value("add_generation_prompt", true);
    if (conv.contains("enable_thinking")) in.extra["enable_thinking"] = conv["enable_thinking"];
    in.tool_arguments = mode;
    return ct.render(in);
}

Result<ChatTemplate> load(const std::string& model) {
    auto ct = ChatTemplate::load_from_dir(test::shared_data_dir() / model);
    if (!ct) return ct;
    JinjaRenderOptions options;
    options.strftime_now = [](std::string_view) { return std::string("21 Nov 2026"); };
    ct->set_render_options(options);
    return ct;
}

class ModelTemplates : public ::testing::Test {
protected:
    void SetUp() override {
        if (test::shared_data_dir().empty()) GTEST_SKIP() << "../shared/data is absent";
    }
};

TEST_F(ModelTemplates, RenderLikePythonJinja2) {
    const auto& convs = expected()["conversations"];
    for (auto m = expected()["models"].begin(); m != expected()["models"].end(); ++m) {
        auto ct = load(m.key());
        ASSERT_TRUE(ct.has_value()) << m.key() << ": " << ct.error().message;
        for (auto c = m.value().begin(); c != m.value().end(); ++c) {
            SCOPED_TRACE(m.key() + " / " + c.key());
            auto got = render(*ct, convs[c.key()], ToolArguments::as_given);
            if (c.value().contains("error")) {
                EXPECT_FALSE(got.has_value()) << "Python raised " << c.value()["error"];
                continue;
            }
            ASSERT_TRUE(got.has_value()) << got.error().message;
            EXPECT_EQ(*got, c.value()["rendered"].get<std::string>());
        }
    }
}

TEST_F(ModelTemplates, SimpleConversationHasUserTextAndGenerationPrompt) {
    struct Case {
        const char* model;
        const char* prompt_suffix;
        bool has_generation_prompt = true;  // Mistral v0.2 ends every user turn with [/INST]
    };
    const Case cases[] = {
        {"qwen2.5", "<|im_start|>assistant\n"},
        {"qwen3", "<|im_start|>assistant\n"},
        {"qwen3/Qwen3-4B-Instruct-2507", "<|im_start|>assistant\n"},
        {"llama3/Llama-3.2-3B-Instruct", "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"mistral-7b-instruct-v0.2", "[/INST]", false},
        {"gemma2", "<start_of_turn>model\n"},
        {"gemma3", "<start_of_turn>model\n"},
        {"deepseek-r1", "<｜Assistant｜>"},
        {"deepseek-r1-distill-qwen", "<｜Assistant｜><think>\n"},
        {"phi-3", "<|assistant|>\n"},
        {"smollm3", "<|im_start|>assistant\n"},
        {"gpt-oss", "<|start|>assistant"},
        {"tinyllama", "<|assistant|>\n"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.model);
        auto ct = load(c.model);
        ASSERT_TRUE(ct.has_value()) << ct.error().message;
        ChatTemplateInputs in;
        in.messages =
            ordered_json::parse(R"([{"role": "user", "content": "Hello from Brigade é 日本"}])");
        auto text = ct->render(in);
        ASSERT_TRUE(text.has_value()) << text.error().message;
        EXPECT_NE(text->find("Hello from Brigade é 日本"), std::string::npos) << *text;
        EXPECT_TRUE(text->ends_with(c.prompt_suffix)) << *text;
        in.add_generation_prompt = false;
        auto without = ct->render(in);
        ASSERT_TRUE(without.has_value()) << without.error().message;
        EXPECT_NE(without->ends_with(c.prompt_suffix), c.has_generation_prompt) << *without;
    }
}

TEST_F(ModelTemplates, SpecialTokensComeFromTokenizerConfig) {
    auto llama = load("llama3/Llama-3.2-3B-Instruct");
    ASSERT_TRUE(llama.has_value());
    EXPECT_EQ(llama->special_tokens()["bos_token"], "<|begin_of_text|>");
    auto r1 = load("deepseek-r1");  // {"content": ...} objects are unwrapped
    ASSERT_TRUE(r1.has_value());
    EXPECT_EQ(r1->special_tokens()["bos_token"], "<｜begin▁of▁sentence｜>");
    EXPECT_FALSE(r1->special_tokens().contains("unk_token"));  // null stays undefined
    auto qwen = load("qwen2.5");
    ASSERT_TRUE(qwen.has_value());
    EXPECT_FALSE(qwen->special_tokens().contains("bos_token"));
    EXPECT_EQ(qwen->special_tokens()["eos_token"], "<|im_end|>");
    // Caller overrides win over tokenizer_config.json.
    ChatTemplateInputs in;
    in.messages = ordered_json::parse(R"([{"role": "user", "content": "x"}])");
    in.extra["bos_token"] = "<BOS>";
    auto text = llama->render(in);
    ASSERT_TRUE(text.has_value());
    EXPECT_TRUE(text->starts_with("<BOS>")) << *text;
}

// OpenAI clients send tool-call arguments as JSON strings. Templates that print objects
// (Qwen2.5, Llama 3.2) get them parsed; DeepSeek R1, which concatenates strings, gets strings.
TEST_F(ModelTemplates, ToolCallArgumentsFollowWhatTheTemplateNeeds) {
    const auto& convs = expected()["conversations"];
    const auto& models = expected()["models"];
    for (const char* model : {"qwen2.5", "llama3/Llama-3.2-3B-Instruct", "qwen3"}) {
        SCOPED_TRACE(model);
        auto ct = load(model);
        ASSERT_TRUE(ct.has_value());
        EXPECT_TRUE(ct->caps().renders_object_arguments);
        auto got = render(*ct, convs["tools_string_args"], ToolArguments::automatic);
        ASSERT_TRUE(got.has_value()) << got.error().message;
        EXPECT_EQ(*got, models[model]["tools"]["rendered"].get<std::string>());
    }
    auto r1 = load("deepseek-r1");
    ASSERT_TRUE(r1.has_value());
    EXPECT_FALSE(r1->caps().renders_object_arguments);
    EXPECT_TRUE(r1->caps().renders_string_arguments);
    const std::string want =
        models["deepseek-r1"]["tools_string_args"]["rendered"].get<std::string>();
    for (const char* conv : {"tools", "tools_string_args"}) {
        auto got = render(*r1, convs[conv], ToolArguments::automatic);
        ASSERT_TRUE(got.has_value()) << conv << ": " << got.error().message;
        EXPECT_EQ(*got, want) << conv;
    }
    // Opting out passes arguments through, so DeepSeek fails on objects like HF does.
    EXPECT_FALSE(render(*r1, convs["tools"], ToolArguments::as_given).has_value());
}

TEST_F(ModelTemplates, ContentPartsAreFlattenedForTextOnlyTemplates) {
    auto phi = load("phi-3");
    ASSERT_TRUE(phi.has_value());
    EXPECT_FALSE(phi->caps().accepts_content_parts);
    auto qwen3 = load("qwen3/Qwen3-4B-Instruct-2507");
    ASSERT_TRUE(qwen3.has_value());
    ChatTemplateInputs parts;
    parts.messages = ordered_json::parse(
        R"([{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "parts"}]}])");
    ChatTemplateInputs plain;
    plain.messages = ordered_json::parse(R"([{"role": "user", "content": "Hello parts"}])");
    for (const ChatTemplate* ct : {&*phi, &*qwen3}) {
        auto a = ct->render(parts);
        auto b = ct->render(plain);
        ASSERT_TRUE(a.has_value()) << a.error().message;
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(*a, *b);
    }
}

}  // namespace
}  // namespace brigade::model::text
