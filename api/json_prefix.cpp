#include "api/json_prefix.hpp"

namespace brigade::api {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonPrefixValidator::feed(std::string_view text) {
    for (char c : text) {
        if (!feed(c)) return false;
    }
    return !failed();
}

bool JsonPrefixValidator::begin_value(char c) {
    switch (c) {
        case '{':
        case '[':
            if (stack_.size() >= kMaxDepth) return fail();
            stack_.push_back(c);
            state_ = c == '{' ? State::object_key : State::array_first;
            return true;
        case '"':
            string_is_key_ = false;
            state_ = State::string;
            return true;
        case '-':
            state_ = State::number_minus;
            return true;
        case '0':
            state_ = State::number_zero;
            return true;
        case 't':
            literal_ = "true";
            break;
        case 'f':
            literal_ = "false";
            break;
        case 'n':
            literal_ = "null";
            break;
        default:
            if (c >= '1' && c <= '9') {
                state_ = State::number_int;
                return true;
            }
            return fail();
    }
    literal_index_ = 1;
    state_ = State::literal;
    return true;
}

bool JsonPrefixValidator::end_value() {
    state_ = stack_.empty() ? State::done : State::after_value;
    return true;
}

// A number ends at the first byte that cannot continue it; that byte is then read as what
// follows the value.
bool JsonPrefixValidator::after_number(char c) {
    end_value();
    return feed(c);
}

void JsonPrefixValidator::state_key(std::string& out) const {
    out.clear();
    out.push_back(static_cast<char>(state_));
    out.push_back(static_cast<char>(string_is_key_));
    out.push_back(static_cast<char>(unicode_left_));
    out.push_back(static_cast<char>(unicode_value_ & 0xFF));
    out.push_back(static_cast<char>(unicode_value_ >> 8));
    out.push_back(static_cast<char>(expect_low_surrogate_));
    out.push_back(static_cast<char>(utf8_left_));
    out.push_back(static_cast<char>(literal_index_));
    out.push_back(literal_ != nullptr ? literal_[0] : '\0');  // "true", "false" or "null"
    out.append(stack_.begin(), stack_.end());
}

bool JsonPrefixValidator::string_text_accepted(std::string_view text) {
    if (text.empty() || text.find_first_of("\"\\") != std::string_view::npos) return false;
    JsonPrefixValidator inside;
    inside.state_ = State::string;
    return inside.feed(text);
}

bool JsonPrefixValidator::string_byte(unsigned char c) {
    if (utf8_left_ > 0) {
        if ((c & 0xC0) != 0x80) return fail();
        --utf8_left_;
        return true;
    }
    // A high surrogate escape must be followed at once by a low one (strict parsers, nlohmann
    // among them, reject lone surrogates).
    if (expect_low_surrogate_ && c != '\\') return fail();
    if (c == '"') {
        if (string_is_key_) {
            state_ = State::colon;
            return true;
        }
        return end_value();
    }
    if (c == '\\') {
        state_ = State::string_escape;
        return true;
    }
    if (c < 0x20) return fail();  // control characters must be escaped
    if (c < 0x80) return true;
    // Lead bytes of 2/3/4-byte sequences (the detokenizer already guarantees well-formed UTF-8;
    // this only keeps stray bytes out).
    if (c >= 0xC2 && c <= 0xDF) {
        utf8_left_ = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        utf8_left_ = 2;
    } else if (c >= 0xF0 && c <= 0xF4) {
        utf8_left_ = 3;
    } else {
        return fail();
    }
    return true;
}

bool JsonPrefixValidator::feed(char c) {
    switch (state_) {
        case State::failed:
            return false;
        case State::start:
            if (is_space(c)) return true;
            if (c != '{') return fail();
            return begin_value(c);
        case State::done:
            return is_space(c) ? true : fail();
        case State::object_key:
            if (is_space(c)) return true;
            if (c == '}') {
                stack_.pop_back();
                return end_value();
            }
            [[fallthrough]];
        case State::object_next_key:
            if (is_space(c)) return true;
            if (c != '"') return fail();
            string_is_key_ = true;
            state_ = State::string;
            return true;
        case State::colon:
            if (is_space(c)) return true;
            if (c != ':') return fail();
            state_ = State::value;
            return true;
        case State::value:
            if (is_space(c)) return true;
            return begin_value(c);
        case State::array_first:
            if (is_space(c)) return true;
            if (c == ']') {
                stack_.pop_back();
                return end_value();
            }
            return begin_value(c);
        case State::after_value:
            if (is_space(c)) return true;
            if (c == ',') {
                state_ = stack_.back() == '{' ? State::object_next_key : State::value;
                return true;
            }
            if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
                stack_.pop_back();
                return end_value();
            }
            return fail();
        case State::string:
            return string_byte(static_cast<unsigned char>(c));
        case State::string_escape:
            if (expect_low_surrogate_ && c != 'u') return fail();
            switch (c) {
                case '"':
                case '\\':
                case '/':
                case 'b':
                case 'f':
                case 'n':
                case 'r':
                case 't':
                    state_ = State::string;
                    return true;
                case 'u':
                    unicode_left_ = 4;
                    unicode_value_ = 0;
                    state_ = State::string_unicode;
                    return true;
                default:
                    return fail();
            }
        case State::string_unicode: {
            if (!is_hex(c)) return fail();
            const int digit = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
            unicode_value_ = static_cast<std::uint16_t>(unicode_value_ * 16 + digit);
            if (--unicode_left_ > 0) {
                // Reject a wrong surrogate as soon as its first two digits show it.
                if (unicode_left_ == 2) {
                    const unsigned high_byte = unicode_value_;
                    const bool is_low = high_byte >= 0xDC && high_byte <= 0xDF;
                    if (expect_low_surrogate_ ? !is_low : is_low) return fail();
                }
                return true;
            }
            const bool is_high = unicode_value_ >= 0xD800 && unicode_value_ <= 0xDBFF;
            const bool is_low = unicode_value_ >= 0xDC00 && unicode_value_ <= 0xDFFF;
            if (expect_low_surrogate_ ? !is_low : is_low) return fail();
            expect_low_surrogate_ = is_high;
            state_ = State::string;
            return true;
        }
        case State::number_minus:
            if (c == '0') {
                state_ = State::number_zero;
                return true;
            }
            if (c >= '1' && c <= '9') {
                state_ = State::number_int;
                return true;
            }
            return fail();
        case State::number_zero:
            if (c == '.') {
                state_ = State::number_dot;
                return true;
            }
            if (c == 'e' || c == 'E') {
                state_ = State::number_exp;
                return true;
            }
            if (is_digit(c)) return fail();  // no leading zeros
            return after_number(c);
        case State::number_int:
            if (is_digit(c)) return true;
            if (c == '.') {
                state_ = State::number_dot;
                return true;
            }
            if (c == 'e' || c == 'E') {
                state_ = State::number_exp;
                return true;
            }
            return after_number(c);
        case State::number_dot:
            if (!is_digit(c)) return fail();
            state_ = State::number_frac;
            return true;
        case State::number_frac:
            if (is_digit(c)) return true;
            if (c == 'e' || c == 'E') {
                state_ = State::number_exp;
                return true;
            }
            return after_number(c);
        case State::number_exp:
            if (c == '+' || c == '-') {
                state_ = State::number_exp_sign;
                return true;
            }
            [[fallthrough]];
        case State::number_exp_sign:
            if (!is_digit(c)) return fail();
            state_ = State::number_exp_digits;
            return true;
        case State::number_exp_digits:
            if (is_digit(c)) return true;
            return after_number(c);
        case State::literal:
            if (c != literal_[literal_index_]) return fail();
            if (literal_[++literal_index_] == '\0') return end_value();
            return true;
    }
    return fail();
}

bool json_prefix_ok(std::string_view text) {
    JsonPrefixValidator validator;
    return validator.feed(text);
}

}  // namespace brigade::api
