#pragma once
// Small checked accessors for tokenizer.json objects: every missing or mistyped field becomes a
// `bad_tokenizer` error that names the component, never an exception.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "model/errors.hpp"
#include "model/text/tokenizer_regex.hpp"

namespace brigade::model::text {

// The `"type"` string of a component object; `what` names it in the error.
Result<std::string> json_type_of(const nlohmann::json& j, std::string_view what);
// `j[key]` as a bool; `fallback` when absent or null (and when mistyped: HF would reject the
// file, but a wrong flag is not worth refusing a model over).
bool json_bool(const nlohmann::json& j, std::string_view key, bool fallback);
// `j[key]` as an unsigned count, `fallback` when absent or null.
std::size_t json_size(const nlohmann::json& j, std::string_view key, std::size_t fallback);
// `j[key]` as a required string.
Result<std::string> json_string(const nlohmann::json& j, std::string_view key,
                                std::string_view what);
// `j[key]` as an optional string (absent or null → nullopt).
std::optional<std::string> json_optional_string(const nlohmann::json& j, std::string_view key);
// `j["pattern"]` = `{"String": s}` or `{"Regex": r}`.
Result<TextPattern> parse_pattern(const nlohmann::json& j, std::string_view what);
// The single code point of `s`, or an error naming `what`.
Result<char32_t> single_code_point(std::string_view s, std::string_view what);

}  // namespace brigade::model::text
