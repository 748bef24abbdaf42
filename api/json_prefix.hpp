#pragma once
// `response_format: {"type": "json_object"}` support: an incremental JSON checker that says
// whether the text so far can still be extended into one valid JSON object (RFC 8259, top level
// an object, surrounding whitespace allowed). The service clones it per candidate token, feeds
// the token's text and masks the token if the clone fails; it allows EOS only once
// `is_complete()`. Cloning copies a small struct and a stack of open containers, so the check is
// a few nanoseconds per byte.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::api {

class JsonPrefixValidator {
public:
    // Nesting beyond this is rejected (keeps a runaway model from growing the stack forever).
    static constexpr std::size_t kMaxDepth = 128;

    // Feeds one byte; returns false (and stays failed) if no valid JSON object starts with the
    // text fed so far.
    bool feed(char c);
    bool feed(std::string_view text);

    // A copy to try a candidate continuation on.
    JsonPrefixValidator clone() const { return *this; }

    // Inside a string, between characters: from here the acceptance of text that holds no
    // quote or backslash depends on nothing else (string_text_accepted), so a token mask need
    // not feed such tokens one by one.
    bool in_plain_string() const {
        return state_ == State::string && utf8_left_ == 0 && !expect_low_surrogate_;
    }
    // Non-empty text without a quote or backslash that a string accepts from in_plain_string():
    // no control characters, well-formed UTF-8 (a character cut short at the end is fine).
    static bool string_text_accepted(std::string_view text);

    // All of the state, as bytes: validators with equal keys accept exactly the same texts (a
    // token mask computed for one key holds for every later state with that key).
    void state_key(std::string& out) const;

    bool failed() const { return state_ == State::failed; }
    // The top-level object has closed (only whitespace may follow).
    bool is_complete() const { return state_ == State::done; }
    std::size_t depth() const { return stack_.size(); }

private:
    enum class State : std::uint8_t {
        start,            // before the top-level object
        object_key,       // after '{' : a key or '}'
        object_next_key,  // after ',' in an object: a key
        colon,            // after a key: ':'
        value,            // a value
        array_first,      // after '[': a value or ']'
        after_value,      // ',' or the container's close
        string,           // inside a string (key or value)
        string_escape,    // after '\'
        string_unicode,   // inside \uXXXX
        number_minus,     // after '-'
        number_zero,      // "0"
        number_int,       // 1-9 digits
        number_dot,       // after '.'
        number_frac,      // digits after '.'
        number_exp,       // after 'e'/'E'
        number_exp_sign,  // after 'e+'/'e-'
        number_exp_digits,
        literal,  // true / false / null
        done,
        failed,
    };

    bool fail() {
        state_ = State::failed;
        return false;
    }
    bool begin_value(char c);
    bool end_value();  // a value finished: where next?
    bool after_number(char c);
    bool string_byte(unsigned char c);

    State state_ = State::start;
    bool string_is_key_ = false;
    std::uint8_t unicode_left_ = 0;  // hex digits left in \uXXXX
    std::uint16_t unicode_value_ = 0;
    bool expect_low_surrogate_ = false;  // a \uD800-\uDBFF must be followed by \uDC00-\uDFFF
    std::uint8_t utf8_left_ = 0;         // continuation bytes left in a multi-byte character
    std::uint8_t literal_index_ = 0;
    const char* literal_ = nullptr;  // "true", "false" or "null" (static storage)
    std::vector<char> stack_;        // '{' or '['
};

// Whether `text` can still be extended into a valid JSON object.
bool json_prefix_ok(std::string_view text);

}  // namespace brigade::api
