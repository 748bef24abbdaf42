#include "api/sse.hpp"

#include <gtest/gtest.h>

namespace brigade::api {
namespace {

TEST(Sse, EventFraming) {
    EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
    EXPECT_EQ(sse_event("two\nlines"), "data: two\ndata: lines\n\n");
    EXPECT_EQ(sse_event(""), "data: \n\n");
    EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Sse, CommentsCannotBreakFraming) {
    EXPECT_EQ(sse_comment("keep-alive"), ": keep-alive\n\n");
    EXPECT_EQ(sse_comment("a\n\nb"), ": a  b\n\n");
}

TEST(Sse, ParserRoundTripsAcrossAnySplit) {
    const std::string stream = sse_comment("keep-alive") + sse_event(R"({"x":"y"})") +
                               sse_event("multi\nline") + std::string(kSseDone);
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
        SseParser parser;
        std::vector<SseMessage> messages;
        parser.feed(stream.substr(0, cut), messages);
        parser.feed(stream.substr(cut), messages);
        ASSERT_EQ(messages.size(), 4u) << cut;
        EXPECT_TRUE(messages[0].comment);
        EXPECT_EQ(messages[0].data, "keep-alive");
        EXPECT_EQ(messages[1].data, R"({"x":"y"})");
        EXPECT_EQ(messages[2].data, "multi\nline");
        EXPECT_EQ(messages[3].data, "[DONE]");
    }
}

TEST(Sse, ParserHandlesCrLfAndNoSpace) {
    SseParser parser;
    std::vector<SseMessage> messages;
    parser.feed("data:abc\r\n\r\nevent: x\ndata: d\n\n", messages);
    ASSERT_EQ(messages.size(), 2u);
    EXPECT_EQ(messages[0].data, "abc");
    EXPECT_EQ(messages[1].data, "d");
}

TEST(Sse, OutboxCoalescesAndBounds) {
    SseOutbox outbox(10);
    EXPECT_TRUE(outbox.push("abcd"));
    EXPECT_TRUE(outbox.push("efgh"));
    EXPECT_FALSE(outbox.push("ijk"));  // would make 11 bytes
    EXPECT_EQ(outbox.pending_bytes(), 8u);
    EXPECT_EQ(outbox.take(), "abcdefgh");
    EXPECT_TRUE(outbox.empty());
    EXPECT_TRUE(outbox.push("ijk"));
}

}  // namespace
}  // namespace brigade::api
