// `brigade tokenize` end to end: the real binary on real tokenizers from shared/data.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

std::string model_dir(const char* name) { return (shared_data_dir() / name).string(); }

TEST(TokenizeCli, EncodesToJsonIdsWithAndWithoutSpecialTokens) {
    if (shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    // Reference ids from reference/tokenizer-expected.json (HF tokenizers 0.23).
    auto plain = run_brigade({"tokenize", "--model", model_dir("llama3"), "--text", "Hello world"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(nlohmann::json::parse(plain.out), nlohmann::json::parse("[9906, 1917]"));

    auto special = run_brigade(
        {"tokenize", "--model", model_dir("llama3"), "--text", "Hello world", "--special"});
    ASSERT_EQ(special.exit_code, 0) << special.err;
    EXPECT_EQ(nlohmann::json::parse(special.out), nlohmann::json::parse("[128000, 9906, 1917]"));

    auto spm = run_brigade({"tokenize", "--model", model_dir("llama2"), "--text", " Hello world"});
    ASSERT_EQ(spm.exit_code, 0) << spm.err;
    EXPECT_EQ(nlohmann::json::parse(spm.out), nlohmann::json::parse("[29871, 15043, 3186]"));
}

TEST(TokenizeCli, DecodesIdList) {
    if (shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    auto r = run_brigade(
        {"tokenize", "--model", model_dir("qwen2.5"), "--decode", "151644,872,198,6023,151645"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "<|im_start|>user\nhi<|im_end|>\n");

    auto skipped = run_brigade({"tokenize", "--model", model_dir("qwen2.5"), "--decode",
                                "151644,872,198,6023,151645", "--skip-special"});
    ASSERT_EQ(skipped.exit_code, 0) << skipped.err;
    EXPECT_EQ(skipped.out, "user\nhi\n");
}

TEST(TokenizeCli, ErrorsGoToStderrWithExitCodeOne) {
    if (shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    auto bad_utf8 = run_brigade({"tokenize", "--model", model_dir("qwen2.5"), "--text", "caf\xC3"});
    EXPECT_EQ(bad_utf8.exit_code, 1);
    EXPECT_NE(bad_utf8.err.find("UTF-8"), std::string::npos) << bad_utf8.err;
    EXPECT_TRUE(bad_utf8.out.empty());

    auto bad_id = run_brigade({"tokenize", "--model", model_dir("qwen2.5"), "--decode", "1,x"});
    EXPECT_EQ(bad_id.exit_code, 1);
    EXPECT_NE(bad_id.err.find("'x'"), std::string::npos) << bad_id.err;

    auto out_of_vocab =
        run_brigade({"tokenize", "--model", model_dir("qwen2.5"), "--decode", "99999999"});
    EXPECT_EQ(out_of_vocab.exit_code, 1);

    auto both =
        run_brigade({"tokenize", "--model", model_dir("qwen2.5"), "--text", "a", "--decode", "1"});
    EXPECT_EQ(both.exit_code, 1);

    TempDir empty;
    auto no_tokenizer = run_brigade({"tokenize", "--model", empty.path().string(), "--text", "a"});
    EXPECT_EQ(no_tokenizer.exit_code, 1);
    EXPECT_NE(no_tokenizer.err.find("tokenizer.json"), std::string::npos) << no_tokenizer.err;

    write_file(empty.path() / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
    auto malformed = run_brigade({"tokenize", "--model", empty.path().string(), "--text", "a"});
    EXPECT_EQ(malformed.exit_code, 1);
    EXPECT_NE(malformed.err.find("not valid JSON"), std::string::npos) << malformed.err;
}

TEST(TokenizeCli, HelpDescribesTheOptions) {
    auto r = run_brigade({"tokenize", "--help"});
    EXPECT_EQ(r.exit_code, 0);
    for (const char* opt : {"--model", "--text", "--special", "--decode"}) {
        EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
    }
}

}  // namespace
}  // namespace brigade::test
