#pragma once
// GPT-2's byte-level alphabet (`bytes_to_unicode`): each of the 256 byte values stands for one
// printable code point, so any byte string becomes a string of "visible" characters. Printable
// Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 map, in
// order, to U+0100 onwards (space → 'Ġ' U+0120, '\n' → 'Ċ' U+010A).

#include <cstdint>
#include <string>
#include <string_view>

namespace brigade::model::text {

// Appends the byte-level form of every byte of `bytes` to `out`.
void append_byte_level(std::string& out, std::string_view bytes);

// The byte a byte-level code point stands for, or -1 if `cp` is not in the alphabet.
int byte_level_to_byte(char32_t cp);

// Turns a byte-level token back into bytes. Returns false (leaving `out` untouched) if any
// character is outside the alphabet; HF then keeps the token's own UTF-8.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace brigade::model::text
