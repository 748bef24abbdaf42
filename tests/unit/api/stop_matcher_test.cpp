#include "api/stop_matcher.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace brigade::api {
namespace {

// Feeds `text` cut at the given offsets and returns everything emitted (feed + flush).
std::string run(const std::vector<std::string>& stops, const std::string& text,
                const std::vector<std::size_t>& cuts, bool* stopped = nullptr) {
    StopMatcher matcher(stops);
    std::string out;
    std::size_t begin = 0;
    for (std::size_t cut : cuts) {
        out += matcher.feed(std::string_view(text).substr(begin, cut - begin));
        begin = cut;
    }
    out += matcher.feed(std::string_view(text).substr(begin));
    out += matcher.flush();
    if (stopped != nullptr) *stopped = matcher.stopped();
    return out;
}

TEST(StopMatcher, NoStopsPassesThrough) {
    StopMatcher matcher({});
    EXPECT_EQ(matcher.feed("hello"), "hello");
    EXPECT_FALSE(matcher.stopped());
}

TEST(StopMatcher, StopsAtFirstMatchAndNeverEmitsStopText) {
    bool stopped = false;
    EXPECT_EQ(run({"END"}, "abc END def", {}, &stopped), "abc ");
    EXPECT_TRUE(stopped);
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
    EXPECT_EQ(run({"world", "lo"}, "hello world", {}), "hel");
}

TEST(StopMatcher, HoldsBackAPossibleStartThenReleasesIt) {
    StopMatcher matcher({"</answer>"});
    EXPECT_EQ(matcher.feed("x </ans"), "x ");
    EXPECT_EQ(matcher.held_bytes(), 5u);
    EXPECT_EQ(matcher.feed("wer"), "");  // "</answer" still a prefix
    EXPECT_EQ(matcher.feed("!"), "</answer!");
    EXPECT_FALSE(matcher.stopped());
}

TEST(StopMatcher, FlushReleasesHeldTailWhenGenerationEnds) {
    StopMatcher matcher({"STOP"});
    EXPECT_EQ(matcher.feed("abcST"), "abc");
    EXPECT_EQ(matcher.flush(), "ST");
}

TEST(StopMatcher, EveryTwoWaySplitGivesTheSameResult) {
    const std::string text = "The answer is 42.\nUser: next question";
    const std::vector<std::string> stops = {"\nUser:", "<|im_end|>"};
    const std::string expected = "The answer is 42.";
    for (std::size_t a = 0; a <= text.size(); ++a) {
        for (std::size_t b = a; b <= text.size(); ++b) {
            bool stopped = false;
            EXPECT_EQ(run(stops, text, {a, b}, &stopped), expected) << a << "," << b;
            EXPECT_TRUE(stopped);
        }
    }
}

TEST(StopMatcher, RandomTokenizationsOfUtf8Text) {
    // Multi-byte characters around and inside the stop string; tokens cut at byte level.
    const std::string text = "Réponse: 日本語 ok ✓ FIN日 suite";
    const std::string expected = "Réponse: 日本語 ok ✓ ";
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 500; ++trial) {
        std::vector<std::size_t> cuts;
        for (std::size_t i = 1; i < text.size(); ++i) {
            if (rng() % 3 == 0) cuts.push_back(i);
        }
        EXPECT_EQ(run({"FIN日"}, text, cuts), expected);
    }
}

TEST(StopMatcher, OverlappingPrefixIsNotLost) {
    // "aab" inside "aaab": the first 'a' is not part of the match.
    EXPECT_EQ(run({"aab"}, "xaaab", {2, 3, 4}), "xa");
}

TEST(StopMatcher, NoMatchEmitsEverythingEventually) {
    const std::string text = "<|im_en|> not quite";
    for (std::size_t a = 0; a <= text.size(); ++a) {
        EXPECT_EQ(run({"<|im_end|>"}, text, {a}), text);
    }
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) { EXPECT_EQ(run({"", "zz"}, "abc", {1}), "abc"); }

TEST(StopMatcher, NothingAfterStop) {
    StopMatcher matcher({"."});
    EXPECT_EQ(matcher.feed("a.b"), "a");
    EXPECT_EQ(matcher.feed("more"), "");
    EXPECT_EQ(matcher.flush(), "");
    EXPECT_EQ(matcher.matched(), ".");
}

}  // namespace
}  // namespace brigade::api
