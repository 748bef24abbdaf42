// StreamingDecoder on real tokenizers: text comes out as soon as it is final, never a broken
// UTF-8 sequence, and the pieces always add up to the full decode. Plus round trips of odd,
// long and random text through the real tokenizers.

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "model/text/tokenizer.hpp"
#include "model/text/unicode.hpp"
#include "model/text/utf8.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::text {
namespace {

using Ids = std::vector<int32_t>;

// Loaded once per test binary: the big vocabularies take a moment to parse.
const Tokenizer* real_tokenizer(const std::string& dir) {
    static std::map<std::string, Tokenizer> cache;
    if (test::shared_data_dir().empty()) return nullptr;
    auto it = cache.find(dir);
    if (it == cache.end()) {
        auto t = Tokenizer::load_from_dir(test::shared_data_dir() / dir);
        if (!t) {
            ADD_FAILURE() << dir << ": " << t.error().what();
            return nullptr;
        }
        it = cache.emplace(dir, std::move(*t)).first;
    }
    return &it->second;
}

// Streams `ids`; returns the pieces (the last one from finish()).
std::vector<std::string> stream(const Tokenizer& tok, const Ids& ids, bool skip_special) {
    StreamingDecoder dec(tok, skip_special);
    std::vector<std::string> pieces;
    for (int32_t id : ids) pieces.push_back(dec.push(id));
    pieces.push_back(dec.finish());
    return pieces;
}

std::string join(const std::vector<std::string>& pieces) {
    std::string s;
    for (const auto& p : pieces) s += p;
    return s;
}

const char* const kReal[] = {"llama2",
                             "tinyllama",
                             "mistral-7b-instruct-v0.2",
                             "phi-3",
                             "smollm2/smollm-v1-135M-tokenizer-with-added-PAD",
                             "qwen2.5",
                             "llama3"};

TEST(StreamingDecoder, PiecesAddUpToTheFullDecodeOnEveryReferenceString) {
    if (test::shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    auto ref = nlohmann::json::parse(
        test::read_file(test::shared_data_dir() / "reference" / "tokenizer-expected.json"));
    for (const char* dir : kReal) {
        const Tokenizer* tok = real_tokenizer(dir);
        ASSERT_NE(tok, nullptr);
        for (const auto& text_json : ref["corpus"]) {
            std::string text = text_json.get<std::string>() + " mixed: <|im_end|> \xF0\x9F\xA4\x97";
            Ids ids = tok->encode(text, true).value();
            for (bool skip : {true, false}) {
                auto pieces = stream(*tok, ids, skip);
                EXPECT_EQ(join(pieces), tok->decode(ids, skip)) << dir << " " << text;
                for (const auto& p : pieces) EXPECT_TRUE(is_valid_utf8(p)) << dir << " " << text;
            }
        }
    }
}

TEST(StreamingDecoder, HoldsBackSplitByteLevelCharacters) {
    const Tokenizer* tok = real_tokenizer("llama3");
    if (tok == nullptr) GTEST_SKIP() << "shared/data not found";
    // Reference ids: "emoji 🤗🚀👍🏽" = emoji, ĠðŁ, ¤, Ĺ, ðŁ, ļ, Ģ, ...
    Ids ids = {38623, 11410, 97, 245, 9468, 248, 222};
    StreamingDecoder dec(*tok);
    EXPECT_EQ(dec.push(38623), "emoji");
    EXPECT_EQ(dec.push(11410), "");  // " " + F0 9F: the space waits with the partial emoji
    EXPECT_EQ(dec.push(97), "");
    EXPECT_EQ(dec.push(245), " \xF0\x9F\xA4\x97");  // 🤗
    EXPECT_EQ(dec.push(9468), "");
    EXPECT_EQ(dec.push(248), "");
    EXPECT_EQ(dec.push(222), "\xF0\x9F\x9A\x80");  // 🚀
    EXPECT_EQ(dec.finish(), "");
    // A stream cut inside a character ends with U+FFFD, as the full decode does.
    EXPECT_EQ(dec.push(9468), "");
    EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");
}

// HF's ByteFallback replaces every byte of an invalid run, even bytes that were valid ASCII, so
// a run is held back whole: ')' followed by a stray 0x89 decodes to two U+FFFD.
TEST(StreamingDecoder, ByteFallbackRunsAreFinalOnlyWhenTheyEnd) {
    const Tokenizer* tok = real_tokenizer("llama2");
    if (tok == nullptr) GTEST_SKIP() << "shared/data not found";
    const int32_t paren = *tok->token_to_id("<0x29>"), stray = *tok->token_to_id("<0x89>");
    EXPECT_TRUE(tok->is_byte_fallback_token(paren));
    EXPECT_FALSE(tok->is_byte_fallback_token(15043));
    Ids ids = {15043, paren, 99999, 1, stray, 3186};  // an unknown id and <s> inside the run
    auto pieces = stream(*tok, ids, true);
    EXPECT_EQ(join(pieces), tok->decode(ids, true));
    EXPECT_EQ(join(pieces), "Hello\xEF\xBF\xBD\xEF\xBF\xBD world");
}

TEST(StreamingDecoder, JoinsByteFallbackTokensIntoOneCharacter) {
    const Tokenizer* tok = real_tokenizer("llama2");
    if (tok == nullptr) GTEST_SKIP() << "shared/data not found";
    // "emoji 🤗": ▁em o ji ▁ <0xF0> <0x9F> <0xA4> <0x97>
    StreamingDecoder dec(*tok);
    EXPECT_EQ(dec.push(953), "em");  // the SPM leading space is stripped at stream start only
    EXPECT_EQ(dec.push(29877), "o");
    EXPECT_EQ(dec.push(2397), "ji");
    EXPECT_EQ(dec.push(29871), " ");
    EXPECT_EQ(dec.push(243), "");
    EXPECT_EQ(dec.push(162), "");
    EXPECT_EQ(dec.push(167), "");
    EXPECT_EQ(dec.push(154), "");  // the run of byte tokens is final only when it ends
    EXPECT_EQ(dec.push(29871), "\xF0\x9F\xA4\x97 ");
    EXPECT_EQ(dec.push(243), "");
    EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");  // a lone 0xF0 byte, as in the full decode
}

TEST(StreamingDecoder, SentencePieceLeadingSpaceOnlyAtStreamStart) {
    const Tokenizer* tok = real_tokenizer("llama2");
    if (tok == nullptr) GTEST_SKIP() << "shared/data not found";
    StreamingDecoder dec(*tok);
    EXPECT_EQ(dec.push(1), "");  // <s>, skipped
    EXPECT_EQ(dec.push(15043), "Hello");
    EXPECT_EQ(dec.push(3186), " world");
    EXPECT_EQ(dec.push(2), "");  // </s>, skipped
    EXPECT_EQ(dec.push(3186), " world");
    EXPECT_EQ(dec.finish(), "");
    // After finish() a new stream starts: its first leading space is stripped again.
    EXPECT_EQ(dec.push(3186), "world");
    StreamingDecoder keep(*tok, /*skip_special_tokens=*/false);
    EXPECT_EQ(keep.push(1), "<s>");
    EXPECT_EQ(keep.push(15043), " Hello");
}

// Random strings from a pool of awkward characters: decode(encode(x)) == x for the byte-level
// tokenizers, and for SentencePiece ones (byte fallback covers every character). SentencePiece
// pools leave out "▁" (it decodes to a space) and added tokens (the normalizer prepends "▁" to
// the text after each one, so HF's decode has an extra space there too).
TEST(RealTokenizers, RoundTripOddWhitespaceAndRandomUnicode) {
    if (test::shared_data_dir().empty()) GTEST_SKIP() << "shared/data not found";
    const char* const pool[] = {" ",
                                "  ",
                                "\t",
                                "\n",
                                "\r\n",
                                "\xC2\xA0",
                                "\xE3\x80\x80",
                                "\xE2\x80\x8B",
                                "a",
                                "Z",
                                "7",
                                "'s",
                                "'LL",
                                "\xC3\xA9",
                                "e\xCC\x81",
                                "\xE6\x97\xA5",
                                "\xF0\x9F\x98\x80",
                                "\xF0\x9F\x8F\xBD",
                                "<|im_start|>",
                                "<s>",
                                "</s>",
                                "\xD8\xA7",
                                "\xE0\xA4\x95",
                                "\xEF\xBF\xBD",
                                "\x01",
                                "{",
                                "\\",
                                "\xE2\x96\x81",
                                "\xC4\xA0"};
    std::mt19937 rng(1234);
    for (const char* dir : {"qwen2.5", "llama3", "llama2", "phi-3",
                            "smollm2/smollm-v1-135M-tokenizer-with-added-PAD"}) {
        const Tokenizer* tok = real_tokenizer(dir);
        ASSERT_NE(tok, nullptr);
        const bool nfc = std::string(dir) == "qwen2.5";
        const bool spm = std::string(dir) == "llama2" || std::string(dir) == "phi-3";
        for (int round = 0; round < 200; ++round) {
            std::string text;
            int n = static_cast<int>(rng() % 24);
            for (int k = 0; k < n; ++k) {
                std::string_view piece = pool[rng() % std::size(pool)];
                if (spm && (piece == "\xE2\x96\x81" || piece.front() == '<')) continue;
                text += piece;
            }
            auto ids = tok->encode(text, false);
            ASSERT_TRUE(ids.has_value()) << dir;
            std::string expect = nfc ? normalize_unicode(text, NormalForm::nfc) : text;
            EXPECT_EQ(tok->decode(*ids, false), expect)
                << dir << " " << nlohmann::json(text).dump();
        }
    }
}

TEST(RealTokenizers, LongInputsStayFastAndExact) {
    const Tokenizer* tok = real_tokenizer("qwen2.5");
    if (tok == nullptr) GTEST_SKIP() << "shared/data not found";
    // One 200,000-letter word: BPE over a single huge piece must not go quadratic.
    std::string word(200000, 'a');
    auto ids = tok->encode(word, false);
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(tok->decode(*ids, false), word);
    // 100,000 newlines and spaces, and a long run of one emoji.
    std::string ws;
    for (int i = 0; i < 50000; ++i) ws += i % 7 == 0 ? "\n" : "  ";
    auto ws_ids = tok->encode(ws, false);
    ASSERT_TRUE(ws_ids.has_value());
    EXPECT_EQ(tok->decode(*ws_ids, false), ws);
    std::string emoji;
    for (int i = 0; i < 20000; ++i) emoji += "\xF0\x9F\xA4\x97";
    auto e_ids = tok->encode(emoji, false);
    ASSERT_TRUE(e_ids.has_value());
    EXPECT_EQ(tok->decode(*e_ids, false), emoji);
}

TEST(RealTokenizers, SharedAcrossThreads) {
    const Tokenizer* tok = real_tokenizer("llama3");
    if (tok == nullptr) GTEST_SKIP() << "shared/data not found";
    const std::string text = "The quick brown fox \xF0\x9F\xA6\x8A jumps over 12345 lazy dogs.\n";
    const Ids want = tok->encode(text, true).value();
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0};
    Tokenizer copy = *tok;  // copies share state
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 200; ++i) {
                if (copy.encode(text, true).value() != want) ++mismatches;
                if (copy.decode(want, true) != text) ++mismatches;
            }
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace brigade::model::text
