#pragma once
// Code-point level helpers for the tokenizer: iteration over UTF-8, the character classes the
// Hugging Face `tokenizers` crate takes from Rust's `char` methods, Unicode normalization
// (utf8proc) and a lossy UTF-8 repair that matches Rust's `String::from_utf8_lossy`.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace brigade::model::text {

// Decodes the code point starting at `s[i]` and advances `i` past it. The input must be valid
// UTF-8 (callers validate first); a stray byte is returned as itself and skipped.
char32_t next_code_point(std::string_view s, std::size_t& i);

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);

// Number of bytes of the UTF-8 sequence led by `lead` (1 for a stray continuation byte).
std::size_t utf8_sequence_length(unsigned char lead);

// Rust `char::is_whitespace` (the Unicode White_Space property).
bool is_whitespace(char32_t cp);
// Rust `char::is_numeric` (general categories Nd, Nl, No).
bool is_numeric(char32_t cp);
// Rust `char::is_alphanumeric` approximated by categories L*, Nd, Nl, No.
bool is_alphanumeric(char32_t cp);
// Regex `\w` as the `regex` crate defines it: letters, marks, Nd, Pc, joiners.
bool is_word_char(char32_t cp);
// BERT's punctuation test: ASCII punctuation or any general category P*.
bool is_punctuation(char32_t cp);
// General category Mn (used by StripAccents).
bool is_nonspacing_mark(char32_t cp);
// General category Cc/Cf/Co/Cn/Cs ("other"), used by BertNormalizer's clean_text.
bool is_control(char32_t cp);
// CJK ideograph blocks that BertNormalizer surrounds with spaces.
bool is_chinese_char(char32_t cp);

enum class NormalForm { nfc, nfd, nfkc, nfkd };
// Unicode normalization of valid UTF-8 text.
std::string normalize_unicode(std::string_view s, NormalForm form);
// Full Unicode lowercase (Rust `str::to_lowercase`), including the 'İ' → "i̇" expansion.
std::string to_lowercase(std::string_view s);

// Rust `String::from_utf8_lossy`: every maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace brigade::model::text
