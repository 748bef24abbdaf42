#pragma once
// UTF-8 helpers shared by the tokenizer and the chat-template engine.

#include <cstddef>
#include <string_view>

namespace brigade::model::text {

// Byte offset of the first invalid UTF-8 sequence in `s` (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or `s.size()` if the whole string is valid.
std::size_t find_invalid_utf8(std::string_view s);

inline bool is_valid_utf8(std::string_view s) { return find_invalid_utf8(s) == s.size(); }

// Length of the longest prefix of `s` that ends on a complete UTF-8 sequence: what a
// streaming decoder may emit now while the rest waits for more bytes.
std::size_t complete_utf8_prefix(std::string_view s);

}  // namespace brigade::model::text
