// Where chat templates come from: chat_template.jinja (preferred, as transformers does),
// chat_template.json, tokenizer_config.json (string or named list), additional_chat_templates/;
// and the errors for directories without a usable template.

#include <gtest/gtest.h>

#include <string>

#include "model/text/chat_template.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::ordered_json;

std::string render_one(const ChatTemplate& ct) {
    ChatTemplateInputs in;
    in.messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    auto r = ct.render(in);
    return r ? *r : "ERROR " + r.error().message;
}

TEST(ChatTemplateLoad, PrefersChatTemplateJinja) {
    test::TempDir dir;
    test::write_file(dir.path() / "tokenizer_config.json",
                     R"({"chat_template": "from config", "bos_token": {"content": "<B>"}})");
    test::write_file(dir.path() / "chat_template.json", R"({"chat_template": "from json"})");
    test::write_file(dir.path() / "chat_template.jinja", "from jinja {{ bos_token }}\n");
    auto ct = ChatTemplate::load_from_dir(dir.path());
    ASSERT_TRUE(ct.has_value()) << ct.error().message;
    EXPECT_EQ(render_one(*ct), "from jinja <B>");  // trailing newline dropped, as jinja2 does
}

TEST(ChatTemplateLoad, FallsBackToChatTemplateJsonThenConfig) {
    test::TempDir dir;
    test::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "from config"})");
    test::write_file(dir.path() / "chat_template.json", R"({"chat_template": "from json"})");
    auto ct = ChatTemplate::load_from_dir(dir.path());
    ASSERT_TRUE(ct.has_value()) << ct.error().message;
    EXPECT_EQ(render_one(*ct), "from json");
    std::filesystem::remove(dir.path() / "chat_template.json");
    ct = ChatTemplate::load_from_dir(dir.path());
    ASSERT_TRUE(ct.has_value()) << ct.error().message;
    EXPECT_EQ(render_one(*ct), "from config");
}

TEST(ChatTemplateLoad, NamedTemplates) {
    test::TempDir dir;
    test::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": [
        {"name": "default", "template": "default {{ messages | length }}"},
        {"name": "tool_use", "template": "tools {{ tools | length }}"},
        {"name": "rag", "template": "rag"}]})");
    auto def = ChatTemplate::load_from_dir(dir.path());
    ASSERT_TRUE(def.has_value()) << def.error().message;
    EXPECT_EQ(render_one(*def), "default 1");
    auto tool = ChatTemplate::load_from_dir(dir.path(), "tool_use");
    ASSERT_TRUE(tool.has_value());
    ChatTemplateInputs in;
    in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    EXPECT_EQ(*tool->render(in), "tools 1");
    auto unknown = ChatTemplate::load_from_dir(dir.path(), "nope");  // falls back to default
    ASSERT_TRUE(unknown.has_value());
    EXPECT_EQ(render_one(*unknown), "default 1");

    test::write_file(dir.path() / "tokenizer_config.json",
                     R"({"chat_template": [{"name": "rag", "template": "rag"}]})");
    auto missing = ChatTemplate::load_from_dir(dir.path(), "tool_use");
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.error().message.find("available: rag"), std::string::npos)
        << missing.error().message;
}

TEST(ChatTemplateLoad, AdditionalChatTemplatesDirectory) {
    test::TempDir dir;
    test::write_file(dir.path() / "chat_template.jinja", "main");
    std::filesystem::create_directory(dir.path() / "additional_chat_templates");
    test::write_file(dir.path() / "additional_chat_templates" / "tool_use.jinja", "extra");
    EXPECT_EQ(render_one(*ChatTemplate::load_from_dir(dir.path())), "main");
    EXPECT_EQ(render_one(*ChatTemplate::load_from_dir(dir.path(), "tool_use")), "extra");
}

TEST(ChatTemplateLoad, ClearErrors) {
    test::TempDir dir;
    auto none = ChatTemplate::load_from_dir(dir.path());
    ASSERT_FALSE(none.has_value());
    EXPECT_NE(none.error().message.find("no chat template"), std::string::npos);

    test::write_file(dir.path() / "tokenizer_config.json", "{not json");
    auto bad = ChatTemplate::load_from_dir(dir.path());
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().code, errc::bad_format);

    test::write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "{% if %}"})");
    auto syntax = ChatTemplate::load_from_dir(dir.path());
    ASSERT_FALSE(syntax.has_value());
    EXPECT_EQ(syntax.error().code, errc::template_error);
    EXPECT_NE(syntax.error().message.find("line 1"), std::string::npos);

    EXPECT_FALSE(ChatTemplate::load_from_dir(dir.path() / "missing").has_value());
}

TEST(ChatTemplateRender, PassesHfVariables) {
    auto ct = ChatTemplate::from_source(
        "{{ messages | length }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|"
        "{{ bos_token }}|{{ eos_token }}|{{ enable_thinking is defined }}|{{ custom }}",
        ordered_json::parse(
            R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": null})"));
    ASSERT_TRUE(ct.has_value()) << ct.error().message;
    ChatTemplateInputs in;
    in.messages = ordered_json::parse(R"([{"role": "user", "content": "x"}])");
    in.extra = ordered_json::parse(R"({"custom": [1, "two"]})");
    EXPECT_EQ(*ct->render(in), "1|None|None|True|<s>|</s>|False|[1, 'two']");
    in.extra["enable_thinking"] = false;
    in.add_generation_prompt = false;
    EXPECT_EQ(*ct->render(in), "1|None|None|False|<s>|</s>|True|[1, 'two']");
}

TEST(ChatTemplateRender, RejectsMalformedInputs) {
    auto ct = ChatTemplate::from_source("x");
    ASSERT_TRUE(ct.has_value());
    ChatTemplateInputs in;
    in.messages = "not a list";
    EXPECT_FALSE(ct->render(in).has_value());
    in.messages = ordered_json::array();
    in.tools = "nope";
    EXPECT_FALSE(ct->render(in).has_value());
}

TEST(ChatTemplateRender, PythonJsonDumps) {
    auto j = ordered_json::parse(R"({"b": 1, "a": [true, null, 1.5, "é\"\n"]})");
    EXPECT_EQ(python_json_dumps(j), R"({"b": 1, "a": [true, null, 1.5, "é\"\n"]})");
}

}  // namespace
}  // namespace brigade::model::text
