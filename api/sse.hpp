#pragma once
// Server-sent events (text/event-stream) as OpenAI streams use them (formats.md §6.3): each event
// is `data: <json>\n\n`, the stream ends with `data: [DONE]\n\n`, lines starting with ':' are
// comments (keep-alives while a long prompt is processed). Sans-io: framing, an outbox that
// bounds what a slow client can make us hold, and a parser for clients and tests.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::api {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// One event carrying `payload`. A payload with newlines becomes several `data:` lines (the
// client joins them with '\n'), so framing can never be broken by the payload.
std::string sse_event(std::string_view payload);

// A comment line (`: text\n\n`); newlines in `text` become spaces.
std::string sse_comment(std::string_view text);

// Bytes waiting to be written to one streaming client. Pending events are coalesced into one
// write; if the client reads slower than the model writes and more than `max_pending_bytes`
// pile up, `push` fails and the caller gives up on the client (cancels the generation) rather
// than buffering without bound.
class SseOutbox {
public:
    explicit SseOutbox(std::size_t max_pending_bytes) : max_pending_bytes_(max_pending_bytes) {}

    // False (and nothing added) if the limit would be exceeded.
    bool push(std::string_view bytes);
    bool empty() const { return pending_.empty(); }
    std::size_t pending_bytes() const { return pending_.size(); }
    // Everything pending, in order; the outbox is empty afterwards.
    std::string take();

private:
    std::size_t max_pending_bytes_;
    std::string pending_;
};

struct SseMessage {
    std::string data;      // joined `data:` lines
    bool comment = false;  // a `:` comment (then `data` holds its text)
};

// Incremental parser of an SSE byte stream (fields other than `data` are ignored).
class SseParser {
public:
    // Appends bytes; complete events (and comments) are appended to `out`.
    void feed(std::string_view bytes, std::vector<SseMessage>& out);

private:
    std::string line_;
    std::string data_;
    bool has_data_ = false;
};

}  // namespace brigade::api
