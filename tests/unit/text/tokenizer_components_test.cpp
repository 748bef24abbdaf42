// Normalizers, pre-tokenizers and decoders one by one, on the examples HF's own docs and tests
// use (huggingface/tokenizers: normalizer.rs split tests, pre_tokenizers/*.rs tests).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/text/decoders.hpp"
#include "model/text/normalizers.hpp"
#include "model/text/pre_tokenizers.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::json;

std::string normalize(const char* spec, std::string_view text) {
    auto n = parse_normalizer(json::parse(spec));
    EXPECT_TRUE(n.has_value()) << (n ? "" : n.error().what());
    return n ? n->apply(text) : std::string();
}

std::vector<std::string> pre_tokenize(const json& spec, std::string text,
                                      std::size_t original_start = 0) {
    auto pt = parse_pre_tokenizer(spec);
    EXPECT_TRUE(pt.has_value()) << (pt ? "" : pt.error().what());
    if (!pt) return {};
    std::vector<Piece> pieces{{std::move(text), original_start}};
    pt->apply(pieces);
    std::vector<std::string> out;
    for (auto& p : pieces) out.push_back(p.text);
    return out;
}

std::string decode(const json& spec, std::vector<std::string> tokens) {
    auto d = parse_decoder(spec);
    EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().what());
    return d ? run_decoder(&*d, std::move(tokens)) : std::string();
}

using Pieces = std::vector<std::string>;

TEST(Normalizers, UnicodeForms) {
    EXPECT_EQ(normalize(R"({"type":"NFC"})", "e\xCC\x81"), "\xC3\xA9");  // e + U+0301 → é
    EXPECT_EQ(normalize(R"({"type":"NFD"})", "\xC3\xA9"), "e\xCC\x81");
    EXPECT_EQ(normalize(R"({"type":"NFKC"})", "\xEF\xAC\x81"), "fi");  // ﬁ ligature
    EXPECT_EQ(normalize(R"({"type":"NFKD"})", "\xC2\xBD"),
              "1\xE2\x81\x84"
              "2");  // ½ → 1⁄2
    EXPECT_EQ(normalize(R"({"type":"NFC"})", "plain ascii"), "plain ascii");
}

TEST(Normalizers, CaseStripReplacePrependSequence) {
    EXPECT_EQ(normalize(R"({"type":"Lowercase"})",
                        "\xC3\x80"
                        "B \xC4\xB0"),
              "\xC3\xA0"
              "b i\xCC\x87");  // ÀB İ → àb i̇
    EXPECT_EQ(normalize(R"({"type":"Strip","strip_left":true,"strip_right":true})",
                        " \t a b \xE3\x80\x80"),
              "a b");
    EXPECT_EQ(normalize(R"({"type":"Strip","strip_left":false,"strip_right":true})", "  a  "),
              "  a");
    EXPECT_EQ(
        normalize(R"({"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"}]})",
                  "caf\xC3\xA9"),
        "cafe");
    EXPECT_EQ(
        normalize(R"({"type":"Replace","pattern":{"Regex":" {2,}"},"content":" "})", "a   b  c d"),
        "a b c d");
    EXPECT_EQ(
        normalize(R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"})", "a b "),
        "a\xE2\x96\x81"
        "b\xE2\x96\x81");
    EXPECT_EQ(normalize(R"({"type":"Prepend","prepend":"\u2581"})", ""), "");
    EXPECT_EQ(normalize(R"({"type":"Prepend","prepend":"\u2581"})", "a"),
              "\xE2\x96\x81"
              "a");
}

TEST(Normalizers, UnknownTypeIsAnError) {
    auto n = parse_normalizer(json::parse(R"({"type":"Frobnicate"})"));
    ASSERT_FALSE(n.has_value());
    EXPECT_NE(n.error().message.find("unknown normalizer type 'Frobnicate'"), std::string::npos);
    EXPECT_FALSE(parse_normalizer(
        json::parse(R"({"type":"Replace","pattern":{"Regex":"("},"content":""})")));
    EXPECT_FALSE(parse_normalizer(json::parse(R"({"type":"Sequence"})")));
    EXPECT_FALSE(parse_normalizer(json::parse(R"([1,2])")));
}

// HF's split example: "the-final--countdown" split on "-" with every behaviour.
TEST(PreTokenizers, SplitBehaviours) {
    auto split = [](const char* behavior) {
        return pre_tokenize({{"type", "Split"},
                             {"pattern", {{"String", "-"}}},
                             {"behavior", behavior},
                             {"invert", false}},
                            "the-final--countdown");
    };
    EXPECT_EQ(split("Removed"), (Pieces{"the", "final", "countdown"}));
    EXPECT_EQ(split("Isolated"), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(split("MergedWithPrevious"), (Pieces{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(split("MergedWithNext"), (Pieces{"the", "-final", "-", "-countdown"}));
    EXPECT_EQ(split("Contiguous"), (Pieces{"the", "-", "final", "--", "countdown"}));
    // invert: the regex names what to keep; the rest is the delimiter.
    EXPECT_EQ(pre_tokenize({{"type", "Split"},
                            {"pattern", {{"Regex", "\\w+"}}},
                            {"behavior", "Removed"},
                            {"invert", true}},
                           "ab, cd"),
              (Pieces{"ab", "cd"}));
    EXPECT_FALSE(parse_pre_tokenizer(
        {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Sideways"}}));
}

TEST(PreTokenizers, MetaspaceSchemes) {
    const std::string sp = "\xE2\x96\x81";  // ▁
    json always = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}};
    EXPECT_EQ(pre_tokenize(always, "Hey friend"), (Pieces{sp + "Hey", sp + "friend"}));
    json no_split = always;
    no_split["split"] = false;
    EXPECT_EQ(pre_tokenize(no_split, "Hey friend"), (Pieces{sp + "Hey" + sp + "friend"}));
    json first = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}};
    EXPECT_EQ(pre_tokenize(first, "Hey", 0), (Pieces{sp + "Hey"}));
    EXPECT_EQ(pre_tokenize(first, "Hey", 7), (Pieces{"Hey"}));  // not at the text's start
    json legacy_never = {{"type", "Metaspace"}, {"replacement", sp}, {"add_prefix_space", false}};
    EXPECT_EQ(pre_tokenize(legacy_never, "Hey friend"), (Pieces{"Hey", sp + "friend"}));
}

TEST(PreTokenizers, DigitsWhitespacePunctuationByteLevel) {
    EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", true}}, "a123b"),
              (Pieces{"a", "1", "2", "3", "b"}));
    EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "a123b"),
              (Pieces{"a", "123", "b"}));
    EXPECT_EQ(pre_tokenize({{"type", "Whitespace"}}, "Hey man!"), (Pieces{"Hey", "man", "!"}));
    EXPECT_EQ(pre_tokenize({{"type", "WhitespaceSplit"}}, "Hey  man!\t"), (Pieces{"Hey", "man!"}));
    EXPECT_EQ(pre_tokenize({{"type", "Punctuation"}}, "Hey, friend!"),
              (Pieces{"Hey", ",", " friend", "!"}));
    EXPECT_EQ(pre_tokenize({{"type", "BertPreTokenizer"}}, "Hey, friend!"),
              (Pieces{"Hey", ",", "friend", "!"}));
    EXPECT_EQ(pre_tokenize({{"type", "CharDelimiterSplit"}, {"delimiter", "x"}}, "axbxxc"),
              (Pieces{"a", "b", "c"}));
    EXPECT_EQ(pre_tokenize({{"type", "FixedLength"}, {"length", 2}}, "abcde"),
              (Pieces{"ab", "cd", "e"}));
    json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
    EXPECT_EQ(pre_tokenize(byte_level, "Hello world"),
              (Pieces{"\xC4\xA0Hello", "\xC4\xA0world"}));  // ĠHello Ġworld
    EXPECT_EQ(pre_tokenize(byte_level, "hi\n"), (Pieces{"\xC4\xA0hi", "\xC4\x8A"}));  // Ċ
    json no_regex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    EXPECT_EQ(pre_tokenize(no_regex, "a b\xC3\xA9"), (Pieces{"a\xC4\xA0"
                                                             "b\xC3\x83\xC2\xA9"}));
    EXPECT_FALSE(parse_pre_tokenizer({{"type", "UnicodeScripts2"}}));
}

TEST(Decoders, ByteLevelByteFallbackFuseStripReplaceMetaspace) {
    EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"\xC4\xA0hi", "<|im_end|>", "\xE6\x97\xA5"}),
              " hi<|im_end|>\xE6\x97\xA5");  // a token outside the alphabet passes as UTF-8
    EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"\xC3\xA6", "\xC4\xB9"}),
              "\xEF\xBF\xBD");  // æ Ĺ = bytes E6 97: an incomplete character → one U+FFFD
    json spm = json::parse(R"({"type":"Sequence","decoders":[
        {"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
        {"type":"ByteFallback"},{"type":"Fuse"},
        {"type":"Strip","content":" ","start":1,"stop":0}]})");
    EXPECT_EQ(decode(spm, {"\xE2\x96\x81Hello", "\xE2\x96\x81world"}), "Hello world");
    EXPECT_EQ(decode(spm, {"<0xE6>", "<0x97>", "<0xA5>", "!"}), "\xE6\x97\xA5!");
    // An invalid run of byte tokens becomes one U+FFFD per byte (HF's ByteFallback).
    EXPECT_EQ(decode(spm, {"a", "<0xE6>", "<0x97>", "b"}),
              "a\xEF\xBF\xBD\xEF\xBF\xBD"
              "b");
    EXPECT_EQ(decode({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}, {"  a  "}),
              " a ");
    const std::string sp = "\xE2\x96\x81";
    json meta = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}};
    EXPECT_EQ(decode(meta, {sp + "Hey", sp + "friend"}), "Hey friend");
    meta["prepend_scheme"] = "never";
    EXPECT_EQ(decode(meta, {sp + "Hey", sp + "friend"}), " Hey friend");
    EXPECT_EQ(decode({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}},
                     {"hel", "##lo", "world", "."}),
              "hello world.");
    EXPECT_EQ(decode({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, {"hel", "lo</w>", "you</w>"}),
              "hello you");
    auto unknown = parse_decoder({{"type", "CTC9"}});
    ASSERT_FALSE(unknown);
    EXPECT_NE(unknown.error().message.find("unknown decoder type 'CTC9'"), std::string::npos);
}

}  // namespace
}  // namespace brigade::model::text
