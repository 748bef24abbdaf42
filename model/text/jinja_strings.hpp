#pragma once
// Python `str` operations on UTF-8 text, as chat templates use them (strip, split, case,
// slicing by code point, escapes).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::model::text::jinja {

// Python's `str.isspace()` for one code point.
bool is_py_space(std::uint32_t cp);

// `s.strip()` / `lstrip()` / `rstrip()` without arguments (Unicode whitespace), or with a set of
// characters to remove (`chars`, itself UTF-8).
std::string_view py_strip(std::string_view s, bool left, bool right,
                          std::optional<std::string_view> chars = std::nullopt);

// `s.split(sep, maxsplit)` / `s.split()` (runs of whitespace) and `rsplit`.
std::vector<std::string> py_split(std::string_view s, std::optional<std::string_view> sep,
                                  std::int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, std::optional<std::string_view> sep,
                                   std::int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// `str.title()`: first letter of each run of letters upper-cased, the rest lower-cased.
std::string py_title(std::string_view s);
// `str.capitalize()`: first character upper-cased, the rest lower-cased.
std::string py_capitalize(std::string_view s);

// `s.replace(old, new, count)`; count < 0 = all.
std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       std::int64_t count);

// Number of non-overlapping occurrences (`str.count`); an empty needle counts len + 1.
std::int64_t py_count(std::string_view s, std::string_view needle);

// Code-point index of `needle` in `s` (`str.find`), or -1.
std::int64_t py_find(std::string_view s, std::string_view needle);

// Decodes the body of a Jinja string literal (Python `unicode-escape` rules).
std::string unescape_string_literal(std::string_view body);

// Appends code point `cp` to `out` as UTF-8.
void append_utf8(std::string& out, std::uint32_t cp);

}  // namespace brigade::model::text::jinja
