#pragma once
// Internal to the tool-call parsers: scanning possibly-truncated JSON and streaming one tool-call
// object `{"name": …, "arguments"|"parameters": {…}}` as OpenAI tool-call deltas.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/completion_service.hpp"

namespace brigade::api::detail {

constexpr std::size_t kIncomplete = static_cast<std::size_t>(-1);
constexpr std::size_t kMalformed = static_cast<std::size_t>(-2);

// End (one past) of the JSON value starting at `s[begin]` (no leading whitespace), kIncomplete if
// `s` ends inside it, kMalformed if it cannot be JSON. Light: checks structure, not every rule.
std::size_t skip_json_value(std::string_view s, std::size_t begin);

struct MemberSpan {
    std::string key;
    std::size_t value_begin = 0;
    std::size_t value_end = kIncomplete;  // one past the value, or kIncomplete
};

struct ObjectScan {
    std::vector<MemberSpan> members;  // complete keys seen so far
    std::size_t end = kIncomplete;    // one past '}', kIncomplete, or kMalformed
};

// Scans the object starting at `s[0] == '{'`.
ObjectScan scan_object(std::string_view s);

// Streams one tool-call object. Feed text that starts at the object's '{'.
class CallObjectStreamer {
public:
    enum class Status { need_more, call, not_a_call };

    CallObjectStreamer(int index, std::function<std::string()> make_id)
        : index_(index), make_id_(std::move(make_id)) {}

    // Appends `text`; on `call` or `not_a_call`, `*consumed` says how many bytes of `text` the
    // object used (the rest follows the object).
    Status feed(std::string_view text, std::vector<ToolCallDelta>& out, std::size_t* consumed);

    // The text of the object so far (for falling back to plain content).
    const std::string& buffer() const { return buffer_; }
    // Whether anything was emitted (after that, the call cannot turn back into content).
    bool emitted() const { return header_sent_; }

private:
    void emit_header(std::string name, std::vector<ToolCallDelta>& out);
    void emit_arguments(std::string text, std::vector<ToolCallDelta>& out);

    int index_;
    std::function<std::string()> make_id_;
    std::string buffer_;
    bool header_sent_ = false;
    bool streaming_arguments_ = false;
    std::size_t arguments_sent_ = 0;  // bytes of the arguments value already emitted
};

// Streams a bare JSON value (Mistral's `[ARGS]{…}`) as argument fragments of call `index`.
class ValueStreamer {
public:
    enum class Status { need_more, done, malformed };
    Status feed(std::string_view text, int index, std::vector<ToolCallDelta>& out,
                std::size_t* consumed);
    const std::string& buffer() const { return buffer_; }

private:
    std::string buffer_;
    std::size_t sent_ = 0;
};

bool is_json_space(char c);
std::size_t skip_json_space(std::string_view s, std::size_t i);

}  // namespace brigade::api::detail
