#pragma once
// UTF-8 checks for the HTTP layer. api/ may not include model/ (house guide §1), so it keeps its
// own small validator: request bodies must be valid UTF-8 and every byte we send must be too.

#include <cstddef>
#include <string>
#include <string_view>

namespace brigade::api {

// Byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points
// above U+10FFFF are invalid), or `s.size()` if all of `s` is valid.
std::size_t find_invalid_utf8(std::string_view s) noexcept;

inline bool is_valid_utf8(std::string_view s) noexcept { return find_invalid_utf8(s) == s.size(); }

// Length of the longest prefix that does not end inside an incomplete (but so far valid)
// multi-byte sequence: what a stream may emit now while the tail waits for more bytes.
std::size_t complete_utf8_prefix(std::string_view s) noexcept;

// `s` with each invalid sequence replaced by U+FFFD (for token strings in logprobs, which can be
// partial characters; their exact bytes go in `bytes`).
std::string sanitize_utf8(std::string_view s);

}  // namespace brigade::api
