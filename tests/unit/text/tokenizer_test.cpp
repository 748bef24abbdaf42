// Tokenizer behaviour on small hand-built tokenizer.json files: every added-token flag, BPE
// options (byte_fallback, unk fusing, ignore_merges, merge ranks, affixes), special-token
// configuration, and clear errors for malformed files and invalid text.

#include "model/text/tokenizer.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// One id per character of this alphabet, in order (id = index).
const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyz <>.!,ABCDEFGHIJKLMNOPQRSTUVWXYZ";

json tiny_tokenizer(json added_tokens = json::array(), json merges = json::array(),
                    json extra_vocab = json::object()) {
    json vocab = json::object();
    for (std::size_t i = 0; i < kAlphabet.size(); ++i) {
        vocab[std::string(1, kAlphabet[i])] = static_cast<int>(i);
    }
    for (auto it = extra_vocab.begin(); it != extra_vocab.end(); ++it) vocab[it.key()] = *it;
    return {
        {"version", "1.0"},
        {"added_tokens", std::move(added_tokens)},
        {"normalizer", nullptr},
        {"pre_tokenizer", nullptr},
        {"post_processor", nullptr},
        {"decoder", {{"type", "Fuse"}}},
        {"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}}}};
}

json added(int id, const std::string& content, bool special = false, bool lstrip = false,
           bool rstrip = false, bool single_word = false, bool normalized = false) {
    return {{"id", id},          {"content", content}, {"single_word", single_word},
            {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized},
            {"special", special}};
}

// Ids of plain alphabet text, one per character.
Ids chars(std::string_view s) {
    Ids out;
    for (char c : s) out.push_back(static_cast<int32_t>(kAlphabet.find(c)));
    return out;
}

Ids cat(std::initializer_list<Ids> parts) {
    Ids out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

Tokenizer load(const json& j, const std::string& config = {}) {
    auto t = Tokenizer::load_from_json(j.dump(), config);
    EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().what());
    return std::move(t).value();
}

Ids encode(const Tokenizer& t, std::string_view text, bool special = false) {
    auto r = t.encode(text, special);
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().what());
    return r ? *r : Ids{};
}

TEST(AddedTokens, LeftmostLongestMatch) {
    auto t = load(tiny_tokenizer(
        {added(100, "<a>"), added(101, "<a><b>"), added(102, "bc"), added(103, "abcd")}));
    EXPECT_EQ(encode(t, "x<a><b>y"), cat({chars("x"), {101}, chars("y")}));
    EXPECT_EQ(encode(t, "<a><c>"), cat({{100}, chars("<c>")}));
    EXPECT_EQ(encode(t, "abcd"), Ids{103});  // starts first, so it wins over "bc"
    EXPECT_EQ(encode(t, "xbcd"), cat({chars("x"), {102}, chars("d")}));
    EXPECT_EQ(encode(t, "<a><a>"), (Ids{100, 100}));
}

TEST(AddedTokens, StripFlagsSwallowWhitespace) {
    auto t =
        load(tiny_tokenizer({added(110, "<m>", false, /*lstrip=*/true),
                             added(111, "<r>", false, false, /*rstrip=*/true), added(112, "<n>")}));
    EXPECT_EQ(encode(t, "a  <m>b"), cat({chars("a"), {110}, chars("b")}));
    EXPECT_EQ(encode(t, "a<r>  b"), cat({chars("a"), {111}, chars("b")}));
    EXPECT_EQ(encode(t, "a <n> b"), cat({chars("a "), {112}, chars(" b")}));
    // lstrip never reaches back into what an rstrip token already took.
    EXPECT_EQ(encode(t, "<r>  <m>x"), cat({{111, 110}, chars("x")}));
}

TEST(AddedTokens, SingleWordNeedsWordBoundaries) {
    auto t = load(tiny_tokenizer({added(120, "ab", false, false, false, /*single_word=*/true)}));
    EXPECT_EQ(encode(t, "ab cab ab."), cat({{120}, chars(" cab "), {120}, chars(".")}));
    EXPECT_EQ(encode(t, "abc"), chars("abc"));
}

TEST(AddedTokens, NormalizedTokensMatchAfterTheNormalizer) {
    json j = tiny_tokenizer({added(130, "hi", false, false, false, false, /*normalized=*/true),
                             added(131, "YO", false, false, false, false, /*normalized=*/false)});
    j["normalizer"] = {{"type", "Lowercase"}};
    auto t = load(j);
    // "YO" matches the raw text; "HI" only matches once lowercased; "yo" is plain text.
    EXPECT_EQ(encode(t, "HI YO yo"), cat({{130}, chars(" "), {131}, chars(" yo")}));
}

TEST(AddedTokens, SpecialFlagControlsDecodeSkipping) {
    auto t = load(tiny_tokenizer({added(140, "<s>", /*special=*/true), added(141, "<t>")}));
    Ids ids = encode(t, "<s>ab<t>");
    EXPECT_EQ(ids, cat({{140}, chars("ab"), {141}}));
    EXPECT_EQ(t.decode(ids, false), "<s>ab<t>");
    EXPECT_EQ(t.decode(ids, true), "ab<t>");
    EXPECT_TRUE(t.is_special(140));
    EXPECT_FALSE(t.is_special(141));
    EXPECT_FALSE(t.is_special(0));
    EXPECT_EQ(t.token_to_id("<s>"), 140);
    EXPECT_EQ(t.id_to_token(141), "<t>");
    EXPECT_EQ(t.id_to_token(99999), "");
    EXPECT_EQ(t.vocab_size(), 142);
    EXPECT_EQ(t.decode(Ids{0, 99999, -5, 1}, false), "ab");  // unknown ids are skipped
}

TEST(AddedTokens, SplitSpecialTokensConfigTreatsThemAsText) {
    json j = tiny_tokenizer({added(140, "<s>", /*special=*/true), added(141, "<t>")});
    auto t = load(j, R"({"split_special_tokens": true})");
    EXPECT_EQ(encode(t, "<s><t>"), cat({chars("<s>"), {141}}));  // only special ones
}

TEST(Bpe, MergeRanksAndLeftmostTies) {
    json extra = {{"ab", 200}, {"bc", 201}, {"aa", 202}};
    auto bc_first = load(tiny_tokenizer(json::array(), {"b c", "a b", "a a"}, extra));
    EXPECT_EQ(encode(bc_first, "abc"), (Ids{0, 201}));
    EXPECT_EQ(encode(bc_first, "aaa"), (Ids{202, 0}));  // equal ranks: leftmost pair first
    auto ab_first = load(tiny_tokenizer(json::array(), {"a b", "b c"}, extra));
    EXPECT_EQ(encode(ab_first, "abc"), (Ids{200, 2}));
    // Merges given as pairs are the same merges.
    auto pairs =
        load(tiny_tokenizer(json::array(), json::parse(R"([["a","b"],["b","c"]])"), extra));
    EXPECT_EQ(encode(pairs, "abc"), (Ids{200, 2}));
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocab) {
    json j = tiny_tokenizer(json::array(), {"a b"}, {{"ab", 200}, {"abc", 201}});
    EXPECT_EQ(encode(load(j), "abc"), (Ids{200, 2}));
    j["model"]["ignore_merges"] = true;
    EXPECT_EQ(encode(load(j), "abc"), (Ids{201}));
}

TEST(Bpe, ByteFallbackAndUnknownFusing) {
    json j = {{"added_tokens", json::array()},
              {"decoder", json::parse(R"({"type":"Sequence","decoders":[{"type":"ByteFallback"},
                                        {"type":"Fuse"}]})")},
              {"model",
               {{"type", "BPE"},
                {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"<0xC3>", 3}, {"<0xA9>", 4}}},
                {"merges", json::array()},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"fuse_unk", true}}}};
    auto t = load(j);
    EXPECT_EQ(encode(t,
                     "a\xC3\xA9"
                     "b"),
              (Ids{1, 3, 4, 2}));  // é → <0xC3> <0xA9>
    EXPECT_EQ(encode(t,
                     "a\xE6\x97\xA5\xE6\x9C\xAC"
                     "b"),
              (Ids{1, 0, 2}));  // 日本: one fused unk
    EXPECT_EQ(t.decode(Ids{1, 3, 4, 2}, false),
              "a\xC3\xA9"
              "b");
    EXPECT_EQ(t.decode(Ids{1, 3, 2}, false),
              "a\xEF\xBF\xBD"
              "b");  // lone 0xC3 → U+FFFD
    j["model"]["fuse_unk"] = false;
    EXPECT_EQ(encode(load(j),
                     "a\xE6\x97\xA5\xE6\x9C\xAC"
                     "b"),
              (Ids{1, 0, 0, 2}));
    j["model"]["byte_fallback"] = false;
    EXPECT_EQ(encode(load(j), "a\xC3\xA9"), (Ids{1, 0}));
    j["model"].erase("unk_token");
    EXPECT_EQ(encode(load(j),
                     "a\xC3\xA9"
                     "b"),
              (Ids{1, 2}));  // no unk: the char is dropped
}

TEST(Bpe, ContinuingSubwordPrefixAndEndOfWordSuffix) {
    json prefix = {{"model",
                    {{"type", "BPE"},
                     {"vocab", {{"h", 0}, {"##e", 1}, {"##l", 2}, {"##o", 3}, {"he", 4}}},
                     {"merges", {"h ##e"}},
                     {"continuing_subword_prefix", "##"}}}};
    EXPECT_EQ(encode(load(prefix), "hello"), (Ids{4, 2, 2, 3}));
    json suffix = {{"model",
                    {{"type", "BPE"},
                     {"vocab", {{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}}},
                     {"merges", {"a b</w>"}},
                     {"end_of_word_suffix", "</w>"}}}};
    EXPECT_EQ(encode(load(suffix), "ab"), (Ids{2}));
}

TEST(PostProcessor, TemplateAndConfigFlagsDecideSpecialTokens) {
    json j = tiny_tokenizer({added(150, "<s>", true), added(151, "</s>", true)});
    j["post_processor"] = json::parse(R"({"type":"TemplateProcessing",
        "single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
                  {"SpecialToken":{"id":"</s>","type_id":0}}],
        "pair":[], "special_tokens":{"<s>":{"id":"<s>","ids":[150],"tokens":["<s>"]},
                                    "</s>":{"id":"</s>","ids":[151],"tokens":["</s>"]}}})");
    auto t = load(j, R"({"bos_token":"<s>","eos_token":{"content":"</s>"}})");
    EXPECT_EQ(encode(t, "ab", true), (Ids{150, 0, 1, 151}));
    EXPECT_EQ(encode(t, "ab", false), (Ids{0, 1}));
    EXPECT_EQ(encode(t, "", true), (Ids{150, 151}));
    EXPECT_EQ(t.special().bos, 150);
    EXPECT_EQ(t.special().eos, 151);
    EXPECT_TRUE(t.special().add_bos);
    EXPECT_TRUE(t.special().add_eos);
    EXPECT_EQ(t.special().stop_ids, (Ids{151}));

    // No post-processor, but tokenizer_config asks for BOS (as transformers would add it).
    auto plain = load(tiny_tokenizer({added(150, "<s>", true)}),
                      R"({"bos_token":"<s>","add_bos_token":true})");
    EXPECT_EQ(encode(plain, "a", true), (Ids{150, 0}));
    EXPECT_TRUE(plain.special().add_bos);
}

TEST(SpecialTokens, FromAllThreeConfigFiles) {
    if (test::shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    const auto data = test::shared_data_dir();
    // Llama 3.2 Instruct: tokenizer.json of llama3 + the instruct model's three config files.
    test::TempDir dir;
    std::filesystem::copy_file(data / "llama3" / "tokenizer.json", dir.path() / "tokenizer.json");
    for (const char* f : {"tokenizer_config.json", "generation_config.json", "config.json"}) {
        std::filesystem::copy_file(data / "llama3" / "Llama-3.2-3B-Instruct" / f, dir.path() / f);
    }
    auto llama = Tokenizer::load_from_dir(dir.path());
    ASSERT_TRUE(llama.has_value()) << llama.error().what();
    const auto& sp = llama->special();
    EXPECT_EQ(sp.bos, 128000);
    EXPECT_EQ(sp.bos_token, "<|begin_of_text|>");
    EXPECT_EQ(sp.eos, 128009);  // <|eot_id|>
    EXPECT_EQ(sp.eot, 128009);
    EXPECT_TRUE(sp.add_bos);
    Ids stops = sp.stop_ids;
    std::sort(stops.begin(), stops.end());
    EXPECT_EQ(stops, (Ids{128001, 128008, 128009}));

    auto qwen = Tokenizer::load_from_dir(data / "qwen2.5");
    ASSERT_TRUE(qwen.has_value());
    EXPECT_EQ(qwen->special().eos, 151645);  // <|im_end|>
    EXPECT_EQ(qwen->special().eot, 151645);
    EXPECT_EQ(qwen->special().pad, 151643);
    EXPECT_FALSE(qwen->special().add_bos);
    EXPECT_EQ(qwen->special().stop_ids, (Ids{151645, 151643}));

    auto llama2 = Tokenizer::load_from_dir(data / "llama2");
    ASSERT_TRUE(llama2.has_value());
    EXPECT_EQ(llama2->special().bos, 1);
    EXPECT_EQ(llama2->special().eos, 2);
    EXPECT_EQ(llama2->special().unk, 0);
    EXPECT_TRUE(llama2->special().add_bos);
    EXPECT_FALSE(llama2->special().add_eos);
    EXPECT_EQ(llama2->special().stop_ids, (Ids{2}));
}

TEST(Errors, InvalidUtf8IsRejectedWithItsOffset) {
    auto t = load(tiny_tokenizer());
    for (std::string bad :
         {std::string("ab\xC3"), std::string("a\xC0\xAF"), std::string("\xED\xA0\x80"),
          std::string("\xFF"), std::string("ok\xF4\x90\x80\x80")}) {
        auto r = t.encode(bad, false);
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error().code, errc::bad_input_text);
        EXPECT_NE(r.error().message.find("UTF-8"), std::string::npos);
    }
    EXPECT_TRUE(t.encode(std::string("a\0b", 3), false).has_value());  // NUL is valid text
}

TEST(Errors, MalformedTokenizerJsonGivesClearMessages) {
    struct Case {
        std::string json_text;
        std::string expect;
    };
    json unknown_norm = tiny_tokenizer();
    unknown_norm["normalizer"] = {{"type", "Shout"}};
    json unknown_pre = tiny_tokenizer();
    unknown_pre["pre_tokenizer"] = {{"type", "Chop"}};
    json unknown_dec = tiny_tokenizer();
    unknown_dec["decoder"] = {{"type", "Unchop"}};
    json unknown_post = tiny_tokenizer();
    unknown_post["post_processor"] = {{"type", "Wrap"}};
    json unigram = tiny_tokenizer();
    unigram["model"]["type"] = "Unigram";
    json bad_merge = tiny_tokenizer(json::array(), {"a zz"});
    json unmade = tiny_tokenizer(json::array(), {"a b"});  // "ab" is not in the vocab
    json bad_regex = tiny_tokenizer();
    bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}};
    json bad_added = tiny_tokenizer({{{"id", 5}}});
    json no_vocab = tiny_tokenizer();
    no_vocab["model"].erase("vocab");
    json bad_id = tiny_tokenizer();
    bad_id["model"]["vocab"]["q"] = "seven";
    const Case cases[] = {
        {"{\"model\": ", "not valid JSON"},
        {"[]", "not an object"},
        {"{}", "no 'model'"},
        {unknown_norm.dump(), "unknown normalizer type 'Shout'"},
        {unknown_pre.dump(), "unknown pre_tokenizer type 'Chop'"},
        {unknown_dec.dump(), "unknown decoder type 'Unchop'"},
        {unknown_post.dump(), "unknown post_processor type 'Wrap'"},
        {unigram.dump(), "'Unigram' is not supported"},
        {bad_merge.dump(), "not in vocab"},
        {unmade.dump(), "'ab', not in vocab"},
        {bad_regex.dump(), "cannot compile regex"},
        {bad_added.dump(), "content"},
        {no_vocab.dump(), "vocab"},
        {bad_id.dump(), "not an integer"},
    };
    for (const auto& c : cases) {
        auto t = Tokenizer::load_from_json(c.json_text);
        ASSERT_FALSE(t.has_value()) << c.json_text.substr(0, 80);
        EXPECT_EQ(t.error().code, errc::bad_tokenizer);
        EXPECT_NE(t.error().message.find(c.expect), std::string::npos)
            << "message: " << t.error().message << "\nexpected to contain: " << c.expect;
    }
    auto bad_config = Tokenizer::load_from_json(tiny_tokenizer().dump(), "{oops");
    ASSERT_FALSE(bad_config.has_value());
    EXPECT_NE(bad_config.error().message.find("tokenizer_config.json"), std::string::npos);
}

TEST(Errors, TruncatedRealFilesAndMissingDirectories) {
    EXPECT_FALSE(Tokenizer::load_from_dir("/nonexistent/model/dir").has_value());
    test::TempDir empty;
    auto none = Tokenizer::load_from_dir(empty.path());
    ASSERT_FALSE(none.has_value());
    EXPECT_NE(none.error().message.find("tokenizer.json"), std::string::npos);
    if (test::shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    std::string full = test::read_file(test::shared_data_dir() / "llama2" / "tokenizer.json");
    for (std::size_t cut : {std::size_t{1}, full.size() / 3, full.size() - 2}) {
        auto t = Tokenizer::load_from_json(std::string_view(full).substr(0, cut));
        EXPECT_FALSE(t.has_value()) << cut;
    }
}

}  // namespace
}  // namespace brigade::model::text
