#include "model/text/tokenizer_json_util.hpp"

#include <nlohmann/json.hpp>

#include "model/text/unicode.hpp"
#include "model/text/utf8.hpp"

namespace brigade::model::text {

Result<std::string> json_type_of(const nlohmann::json& j, std::string_view what) {
    if (!j.is_object()) {
        return make_error(errc::bad_tokenizer, std::string(what) + " must be a JSON object");
    }
    auto it = j.find("type");
    if (it == j.end() || !it->is_string()) {
        return make_error(errc::bad_tokenizer, std::string(what) + " has no \"type\" string");
    }
    return it->get<std::string>();
}

bool json_bool(const nlohmann::json& j, std::string_view key, bool fallback) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_boolean()) return fallback;
    return it->get<bool>();
}

std::size_t json_size(const nlohmann::json& j, std::string_view key, std::size_t fallback) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0) return fallback;
    return it->get<std::size_t>();
}

Result<std::string> json_string(const nlohmann::json& j, std::string_view key,
                                std::string_view what) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
        return make_error(errc::bad_tokenizer,
                          std::string(what) + " needs a string field '" + std::string(key) + "'");
    }
    return it->get<std::string>();
}

std::optional<std::string> json_optional_string(const nlohmann::json& j, std::string_view key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
}

Result<TextPattern> parse_pattern(const nlohmann::json& j, std::string_view what) {
    auto it = j.find("pattern");
    if (it == j.end() || !it->is_object()) {
        return make_error(errc::bad_tokenizer, std::string(what) + " needs a 'pattern' object");
    }
    if (auto s = it->find("String"); s != it->end() && s->is_string()) {
        return TextPattern::from_string(s->get<std::string>());
    }
    if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
        return TextPattern::from_regex(r->get_ref<const std::string&>());
    }
    return make_error(errc::bad_tokenizer,
                      std::string(what) + " pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

Result<char32_t> single_code_point(std::string_view s, std::string_view what) {
    if (s.empty() || !is_valid_utf8(s)) {
        return make_error(errc::bad_tokenizer, std::string(what) + " must be one character");
    }
    std::size_t i = 0;
    char32_t cp = next_code_point(s, i);
    if (i != s.size()) {
        return make_error(errc::bad_tokenizer, std::string(what) + " must be one character");
    }
    return cp;
}

}  // namespace brigade::model::text
