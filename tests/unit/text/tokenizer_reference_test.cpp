// Parity with Hugging Face `tokenizers`: every string of reference/tokenizer-expected.json,
// for all seven real tokenizers, must give the same ids (with and without special tokens) and
// the same decoded text.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/text/tokenizer.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::json;

// Tokenizer names of the reference file → directories under shared/data (its README).
const std::map<std::string, std::string>& reference_dirs() {
    static const std::map<std::string, std::string> dirs = {
        {"llama2", "llama2"},
        {"tinyllama", "tinyllama"},
        {"mistral-7b-instruct-v0.2", "mistral-7b-instruct-v0.2"},
        {"phi-3", "phi-3"},
        {"smollm-v1", "smollm2/smollm-v1-135M-tokenizer-with-added-PAD"},
        {"qwen2.5", "qwen2.5"},
        {"llama3", "llama3"},
    };
    return dirs;
}

std::string escape(std::string_view s) { return json(std::string(s)).dump(); }

std::string ids_to_string(const std::vector<int32_t>& ids) { return json(ids).dump(); }

// A readable account of where two id lists part ways, with the vocab strings around it.
std::string describe_mismatch(const Tokenizer& tok, const std::vector<int32_t>& want,
                              const std::vector<int32_t>& got) {
    std::size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    std::ostringstream os;
    os << "\n  expected " << ids_to_string(want) << "\n  got      " << ids_to_string(got)
       << "\n  first difference at index " << i << ":";
    for (std::size_t k = i; k < i + 4; ++k) {
        os << "\n    [" << k << "] expected "
           << (k < want.size() ? std::to_string(want[k]) + " " + escape(tok.id_to_token(want[k]))
                               : "(end)")
           << " | got "
           << (k < got.size() ? std::to_string(got[k]) + " " + escape(tok.id_to_token(got[k]))
                              : "(end)");
    }
    return os.str();
}

json load_reference() {
    auto path = test::shared_data_dir() / "reference" / "tokenizer-expected.json";
    return json::parse(test::read_file(path));
}

// Checks every reference row for `name` against `tok`; counts the rows checked.
void check_reference_rows(const Tokenizer& tok, const json& rows, const std::string& name,
                          int& checked) {
    for (const auto& row : rows) {
        const auto text = row["text"].get<std::string>();
        const auto want_ids = row["ids"].get<std::vector<int32_t>>();
        const auto want_special = row["ids_with_special"].get<std::vector<int32_t>>();
        const auto want_decoded = row["decoded"].get<std::string>();
        auto ids = tok.encode(text, false);
        ASSERT_TRUE(ids.has_value()) << name << " " << escape(text) << ": " << ids.error().what();
        EXPECT_EQ(*ids, want_ids) << name << " ids of " << escape(text)
                                  << describe_mismatch(tok, want_ids, *ids);
        auto with_special = tok.encode(text, true);
        ASSERT_TRUE(with_special.has_value());
        EXPECT_EQ(*with_special, want_special)
            << name << " ids_with_special of " << escape(text)
            << describe_mismatch(tok, want_special, *with_special);
        auto decoded = tok.decode(want_ids, false);
        EXPECT_EQ(decoded, want_decoded)
            << name << " decode of " << escape(text) << "\n  expected " << escape(want_decoded)
            << "\n  got      " << escape(decoded);
        ++checked;
    }
}

class ReferenceTokenizers : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTokenizers, MatchesHuggingFace) {
    if (test::shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    const std::string name = GetParam();
    json ref = load_reference();
    ASSERT_TRUE(ref["tokenizers"].contains(name)) << name;
    auto tok = Tokenizer::load_from_dir(test::shared_data_dir() / reference_dirs().at(name));
    ASSERT_TRUE(tok.has_value()) << tok.error().what();
    int n = 0;
    check_reference_rows(*tok, ref["tokenizers"][name], name, n);
    EXPECT_EQ(static_cast<std::size_t>(n), ref["corpus"].size());
}

INSTANTIATE_TEST_SUITE_P(AllSeven, ReferenceTokenizers,
                         ::testing::Values("llama2", "tinyllama", "mistral-7b-instruct-v0.2",
                                           "phi-3", "smollm-v1", "qwen2.5", "llama3"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s) {
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             }
                             return s;
                         });

// Qwen2 layout: no tokenizer.json, only vocab.json + merges.txt + tokenizer_config.json. The
// tokenizer built from them must equal the one HF's converter wrote to tokenizer.json.
TEST(VocabMergesLayout, Qwen25MatchesConvertedTokenizerJson) {
    if (test::shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    const auto src = test::shared_data_dir() / "qwen2.5";
    test::TempDir dir;
    for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
        std::filesystem::copy_file(src / f, dir.path() / f);
    }
    auto from_files = Tokenizer::load_from_dir(dir.path());
    ASSERT_TRUE(from_files.has_value()) << from_files.error().what();
    auto from_json = Tokenizer::load_from_dir(src);
    ASSERT_TRUE(from_json.has_value()) << from_json.error().what();
    EXPECT_EQ(from_files->vocab_size(), from_json->vocab_size());

    json ref = load_reference();
    int n = 0;
    check_reference_rows(*from_files, ref["tokenizers"]["qwen2.5"], "qwen2.5 (vocab.json)", n);
    EXPECT_EQ(static_cast<std::size_t>(n), ref["corpus"].size());

    // Beyond the corpus: a long mixed text, every added token, odd whitespace and code.
    std::string text = test::read_file(src / "tokenizer_config.json");
    text += " Ünïcödé façade — ½ ² 2024年 ｆｕｌｌｗｉｄｔｈ \u00a0\u3000\t\r\n x";
    for (int id = 151643; id <= 151664; ++id) text += from_json->id_to_token(id) + "a ";
    auto a = from_files->encode(text, true);
    auto b = from_json->encode(text, true);
    ASSERT_TRUE(a.has_value() && b.has_value());
    EXPECT_EQ(*a, *b) << describe_mismatch(*from_json, *b, *a);
    for (int id = 151643; id <= 151664; ++id) {
        EXPECT_EQ(from_files->is_special(id), from_json->is_special(id)) << id;
        EXPECT_EQ(from_files->id_to_token(id), from_json->id_to_token(id)) << id;
    }
}

}  // namespace
}  // namespace brigade::model::text
