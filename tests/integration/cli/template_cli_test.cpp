// `brigade template` end to end: the real binary renders real model templates, takes tools and
// --var values, and reports bad input on stderr with exit status 1.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

class TemplateCli : public ::testing::Test {
protected:
    void SetUp() override {
        if (shared_data_dir().empty()) GTEST_SKIP() << "../shared/data is absent";
        write_file(dir_.path() / "chat.json",
                   R"([{"role": "system", "content": "Be terse."},
                       {"role": "user", "content": "Hello é 日本"}])");
    }
    std::string model(const std::string& name) const { return (shared_data_dir() / name).string(); }
    std::string file(const std::string& name) const { return (dir_.path() / name).string(); }
    TempDir dir_;
};

TEST_F(TemplateCli, RendersQwenPrompt) {
    auto r =
        run_brigade({"template", "--model", model("qwen2.5"), "--messages", file("chat.json")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out,
              "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHello é 日本<|im_end|>\n"
              "<|im_start|>assistant\n");
    auto no_prompt = run_brigade({"template", "--model", model("qwen2.5"), "--messages",
                                  file("chat.json"), "--no-generation-prompt"});
    ASSERT_EQ(no_prompt.exit_code, 0) << no_prompt.err;
    EXPECT_EQ(
        no_prompt.out,
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHello é 日本<|im_end|>\n");
}

TEST_F(TemplateCli, VarsAndTools) {
    // enable_thinking=false parses as JSON false: Qwen3 then emits an empty think block.
    auto think = run_brigade({"template", "--model", model("qwen3"), "--messages",
                              file("chat.json"), "--var", "enable_thinking=false"});
    ASSERT_EQ(think.exit_code, 0) << think.err;
    EXPECT_TRUE(think.out.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << think.out;

    // A value that is not JSON is a string: Llama 3.2 prints date_string.
    auto date = run_brigade({"template", "--model", model("llama3/Llama-3.2-3B-Instruct"),
                             "--messages", file("chat.json"), "--var", "date_string=01 Feb 2025"});
    ASSERT_EQ(date.exit_code, 0) << date.err;
    EXPECT_NE(date.out.find("Today Date: 01 Feb 2025"), std::string::npos) << date.out;

    write_file(dir_.path() / "tools.json",
               R"([{"type": "function", "function": {"name": "get_weather",
                   "description": "Weather", "parameters": {"type": "object", "properties": {}}}}])");
    auto tools = run_brigade({"template", "--model", model("qwen2.5"), "--messages",
                              file("chat.json"), "--tools", file("tools.json")});
    ASSERT_EQ(tools.exit_code, 0) << tools.err;
    EXPECT_NE(tools.out.find(R"({"type": "function", "function": {"name": "get_weather")"),
              std::string::npos)
        << tools.out;
}

TEST_F(TemplateCli, OpenAiRequestBodyWithStringArguments) {
    write_file(dir_.path() / "request.json", R"({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})");
    auto r =
        run_brigade({"template", "--model", model("qwen2.5"), "--messages", file("request.json")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Parsed into an object, so tojson prints it once, not as a quoted string.
    EXPECT_NE(r.out.find(R"({"name": "get_weather", "arguments": {"city": "Paris"}})"),
              std::string::npos)
        << r.out;
}

TEST_F(TemplateCli, ErrorsGoToStderrWithStatus1) {
    auto missing =
        run_brigade({"template", "--model", file("nope"), "--messages", file("chat.json")});
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_TRUE(missing.out.empty());
    EXPECT_NE(missing.err.find("error"), std::string::npos);

    write_file(dir_.path() / "bad.json", "[{\"role\": ");
    auto bad =
        run_brigade({"template", "--model", model("qwen2.5"), "--messages", file("bad.json")});
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.err.find("not valid JSON"), std::string::npos) << bad.err;

    // Gemma 2 rejects a system message with raise_exception: the message reaches the user.
    auto raised =
        run_brigade({"template", "--model", model("gemma2"), "--messages", file("chat.json")});
    EXPECT_EQ(raised.exit_code, 1);
    EXPECT_NE(raised.err.find("System role not supported"), std::string::npos) << raised.err;
    EXPECT_NE(raised.err.find("line"), std::string::npos) << raised.err;

    auto bad_var = run_brigade({"template", "--model", model("qwen2.5"), "--messages",
                                file("chat.json"), "--var", "novalue"});
    EXPECT_EQ(bad_var.exit_code, 1);
}

TEST_F(TemplateCli, HelpIsReadable) {
    auto r = run_brigade({"template", "--help"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("--messages"), std::string::npos);
    EXPECT_NE(r.out.find("--var"), std::string::npos);
    EXPECT_NE(r.out.find("--no-generation-prompt"), std::string::npos);
}

}  // namespace
}  // namespace brigade::test
