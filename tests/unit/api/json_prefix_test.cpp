#include "api/json_prefix.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace brigade::api {
namespace {

bool complete(std::string_view text) {
    JsonPrefixValidator v;
    return v.feed(text) && v.is_complete();
}

TEST(JsonPrefix, ValidPrefixes) {
    for (const char* prefix : {"",
                               " ",
                               "{",
                               "{\"",
                               "{\"a",
                               "{\"a\"",
                               "{\"a\":",
                               "{\"a\": 1",
                               "{\"a\": -",
                               "{\"a\": -0.",
                               "{\"a\": 1e",
                               "{\"a\": 1E+",
                               "{\"a\": t",
                               "{\"a\": nul",
                               "{\"a\": [",
                               "{\"a\": [1, ",
                               "{\"a\": {\"b\": [[",
                               "{\"a\": \"x\\",
                               "{\"a\": \"\\u00",
                               "{\"a\": \"é日",
                               "{\"a\": 1}",
                               "{\"a\": 1} \n"}) {
        EXPECT_TRUE(json_prefix_ok(prefix)) << prefix;
    }
}

TEST(JsonPrefix, InvalidPrefixes) {
    for (const char* prefix : {"[",
                               "\"a\"",
                               "1",
                               "x",
                               "{a",
                               "{\"a\" 1",
                               "{\"a\":}",
                               "{\"a\": 01",
                               "{\"a\": 1.}",
                               "{\"a\": 1.e",
                               "{\"a\": -a",
                               "{\"a\": tru ",
                               "{\"a\": nulx",
                               "{\"a\": [1,]",
                               "{\"a\": [}",
                               "{\"a\": 1,}",
                               "{,",
                               "{\"a\": 1}}",
                               "{\"a\": 1} x",
                               "{\"a\": \"\\x",
                               "{\"a\": \"\\u12g",
                               "{\"a\": \"\n\"",
                               "{\"a\": 1 2",
                               "{\"a\":: 1",
                               "{\"a\": [1 2]"}) {
        EXPECT_FALSE(json_prefix_ok(prefix)) << prefix;
    }
}

TEST(JsonPrefix, CompleteOnlyWhenTopObjectCloses) {
    EXPECT_TRUE(complete("{}"));
    EXPECT_TRUE(complete(" {\"a\": [1, 2.5e-3, true, null, {\"b\": \"}\"}]} "));
    EXPECT_FALSE(complete("{\"a\": [1]"));
    EXPECT_FALSE(complete("{\"a\": 1"));
}

TEST(JsonPrefix, FailureIsSticky) {
    JsonPrefixValidator v;
    EXPECT_FALSE(v.feed("{]"));
    EXPECT_TRUE(v.failed());
    EXPECT_FALSE(v.feed('}'));
}

TEST(JsonPrefix, CloneIsIndependent) {
    JsonPrefixValidator v;
    ASSERT_TRUE(v.feed("{\"k\": ["));
    JsonPrefixValidator good = v.clone();
    JsonPrefixValidator bad = v.clone();
    EXPECT_TRUE(good.feed("1]}"));
    EXPECT_TRUE(good.is_complete());
    EXPECT_FALSE(bad.feed("}"));
    EXPECT_TRUE(v.feed("2"));  // the original is untouched
    EXPECT_EQ(v.depth(), 2u);
}

TEST(JsonPrefix, DepthIsBounded) {
    std::string deep = "{\"a\": ";
    for (std::size_t i = 0; i < JsonPrefixValidator::kMaxDepth + 5; ++i) deep += "[";
    EXPECT_FALSE(json_prefix_ok(deep));
}

// Every prefix of valid JSON documents is accepted, and the full text completes; the same
// documents with one byte changed are judged like nlohmann's parser judges them.
TEST(JsonPrefix, AgreesWithAFullParser) {
    const std::vector<std::string> documents = {
        R"({"name": "Ann", "age": 31, "tags": ["a", "b\"c", "\u00e9"], "ok": false})",
        R"({"nested": {"deep": {"deeper": [[], {}, [1, -2, 3.5e10, -0.0, 1E-7]]}}})",
        R"({"s": "tab\tnew\nline \\ slash \/ unicode \ud83d\ude00 日本"})", R"({})",
        R"({"n": null, "t": true, "f": false, "z": 0})"};
    std::mt19937 rng(3);
    const std::string alphabet = "{}[]\":,0123456789.eE+-tfnaul \\x";
    for (const auto& doc : documents) {
        ASSERT_FALSE(nlohmann::json::parse(doc, nullptr, false).is_discarded());
        for (std::size_t i = 0; i <= doc.size(); ++i) {
            EXPECT_TRUE(json_prefix_ok(doc.substr(0, i))) << doc.substr(0, i);
        }
        EXPECT_TRUE(complete(doc));
        for (int trial = 0; trial < 400; ++trial) {
            std::string mutated = doc;
            mutated[rng() % mutated.size()] = alphabet[rng() % alphabet.size()];
            const nlohmann::json parsed = nlohmann::json::parse(mutated, nullptr, false);
            const bool valid_object = !parsed.is_discarded() && parsed.is_object();
            // A complete valid object must be accepted and completed; an accepted complete
            // document must be valid.
            JsonPrefixValidator v;
            const bool ok = v.feed(mutated);
            if (valid_object) {
                EXPECT_TRUE(ok && v.is_complete()) << mutated;
            }
            if (ok && v.is_complete()) {
                EXPECT_TRUE(valid_object) << mutated;
            }
        }
    }
}

// The token mask accepts text without quotes or backslashes wherever in_plain_string() holds
// by one precomputed test per token: feeding such text there must agree with that test.
TEST(JsonPrefix, StringTextAcceptanceDependsOnlyOnTheText) {
    const std::vector<std::string> inside = {
        R"({")",
        R"({"key)",
        R"({"a": ")",
        R"({"a": "x\n)",
        R"({"a": [1, {"b": "y)",
        "{\"\u00e9\u4e2d)",
        R"({"a": "\ud83d\ude00)",
        R"({"k\"ey)",
        "{\"a\": \"caf\xC3\xA9",
    };
    const std::vector<std::string> outside = {
        R"({)",         R"({"a")",        R"({"a": )",
        R"({"a": "x\)", R"({"a": "\u00)", R"({"a": "\ud83d)",
        R"({"a": 1)",   "{\"a\": \"\xC3", R"({"a": "b"})",
    };
    // Printable ASCII, whole and cut-short UTF-8, control characters, stray and overlong bytes.
    std::mt19937 rng(5);
    const std::vector<std::string> pieces = {"a",
                                             " ",
                                             "Z",
                                             "{",
                                             ":",
                                             ",",
                                             "~",
                                             "\xC3\xA9",
                                             "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80",
                                             "\xC3",
                                             "\xE4\xB8",
                                             "\xA9",
                                             "\x80",
                                             "\xFF",
                                             "\t",
                                             "\x7F",
                                             "\xC0\x80",
                                             "\x01"};
    std::vector<std::string> texts = {"", "hello", " world.", "{[:,]}", "caf\xC3\xA9"};
    for (int i = 0; i < 400; ++i) {
        std::string t;
        for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k)
            t += pieces[rng() % pieces.size()];
        texts.push_back(t);
    }
    int accepted = 0;
    int refused = 0;
    for (const auto& prefix : inside) {
        JsonPrefixValidator v;
        ASSERT_TRUE(v.feed(prefix)) << prefix;
        ASSERT_TRUE(v.in_plain_string()) << prefix;
        for (const auto& t : texts) {
            JsonPrefixValidator probe = v;
            const bool fed = !t.empty() && probe.feed(t);
            EXPECT_EQ(fed, JsonPrefixValidator::string_text_accepted(t)) << prefix << " + " << t;
            (fed ? accepted : refused) += 1;
        }
    }
    EXPECT_GT(accepted, 100);  // both outcomes are exercised
    EXPECT_GT(refused, 100);
    for (const std::string t : {"a\"b", "a\\b"}) {
        EXPECT_FALSE(JsonPrefixValidator::string_text_accepted(t)) << t;  // they end or escape
    }
    for (const auto& prefix : outside) {
        JsonPrefixValidator v;
        ASSERT_TRUE(v.feed(prefix)) << prefix;
        EXPECT_FALSE(v.in_plain_string()) << prefix;
    }
}

// Token masks are cached by state_key: every prefix with the same key must accept the same
// texts, and different positions in a document must not all share one key.
TEST(JsonPrefix, EqualStateKeysAcceptTheSameTexts) {
    const std::vector<std::string> documents = {
        R"({"a": [1, 2.5e-3, {"b": "x\u00e9y", "c": [true, false, null]}], "d": {}})",
        R"({"k": "v", "k2": "\ud83d\ude00 caf\u00e9", "n": -0.0, "m": [[], [[1]]]})",
        "{\"s\": \"caf\xC3\xA9 \xE4\xB8\xAD\", \"t\": [\"a\", \"b\"]}",
    };
    std::mt19937 rng(7);
    const std::vector<std::string> pieces = {"{", "}",  "[", "]",    ":",    ",",   "\"",  " ", "1",
                                             "0", ".",  "e", "-",    "tr",   "ue",  "nul", "l", "f",
                                             "a", "\\", "u", "\xC3", "\xA9", "\\n", "\t"};
    std::vector<std::string> texts;
    for (int i = 0; i < 300; ++i) {
        std::string t;
        for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k)
            t += pieces[rng() % pieces.size()];
        texts.push_back(t);
    }
    std::map<std::string, std::vector<bool>> seen;  // key -> acceptance of each text
    int compared = 0;
    for (const auto& doc : documents) {
        for (std::size_t i = 0; i <= doc.size(); ++i) {
            JsonPrefixValidator v;
            if (!v.feed(std::string_view(doc).substr(0, i))) continue;
            std::vector<bool> accepts;
            for (const auto& t : texts) {
                JsonPrefixValidator probe = v;
                accepts.push_back(probe.feed(t));
            }
            std::string key;
            v.state_key(key);
            const auto [it, fresh] = seen.emplace(key, accepts);
            if (!fresh) {
                EXPECT_EQ(it->second, accepts) << "prefix " << doc.substr(0, i);
                ++compared;
            }
        }
    }
    EXPECT_GT(compared, 20);      // keys recur
    EXPECT_GT(seen.size(), 30u);  // and differ
}

}  // namespace
}  // namespace brigade::api
