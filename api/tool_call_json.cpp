#include "api/tool_call_json.hpp"

#include <nlohmann/json.hpp>
#include <utility>

namespace brigade::api::detail {

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::size_t skip_json_space(std::string_view s, std::size_t i) {
    while (i < s.size() && is_json_space(s[i])) ++i;
    return i;
}

namespace {

// End of the string starting at s[begin] == '"'.
std::size_t skip_string(std::string_view s, std::size_t begin) {
    for (std::size_t i = begin + 1; i < s.size(); ++i) {
        if (s[i] == '\\') {
            ++i;
        } else if (s[i] == '"') {
            return i + 1;
        }
    }
    return kIncomplete;
}

}  // namespace

std::size_t skip_json_value(std::string_view s, std::size_t begin) {
    if (begin >= s.size()) return kIncomplete;
    const char c = s[begin];
    if (c == '"') return skip_string(s, begin);
    if (c == '{' || c == '[') {
        // Bracket counting that respects strings; enough to find where the value ends.
        std::vector<char> stack{c};
        for (std::size_t i = begin + 1; i < s.size(); ++i) {
            const char d = s[i];
            if (d == '"') {
                const std::size_t end = skip_string(s, i);
                if (end == kIncomplete) return kIncomplete;
                i = end - 1;
            } else if (d == '{' || d == '[') {
                stack.push_back(d);
            } else if (d == '}' || d == ']') {
                if ((d == '}') != (stack.back() == '{')) return kMalformed;
                stack.pop_back();
                if (stack.empty()) return i + 1;
            }
        }
        return kIncomplete;
    }
    if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
        std::size_t i = begin;
        while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !is_json_space(s[i])) {
            ++i;
        }
        return i == s.size() ? kIncomplete : i;
    }
    return kMalformed;
}

ObjectScan scan_object(std::string_view s) {
    ObjectScan scan;
    if (s.empty()) return scan;
    if (s[0] != '{') {
        scan.end = kMalformed;
        return scan;
    }
    std::size_t i = 1;
    for (;;) {
        i = skip_json_space(s, i);
        if (i >= s.size()) return scan;
        if (s[i] == '}') {
            scan.end = i + 1;
            return scan;
        }
        if (!scan.members.empty()) {
            if (s[i] != ',') {
                scan.end = kMalformed;
                return scan;
            }
            i = skip_json_space(s, i + 1);
            if (i >= s.size()) return scan;
        }
        if (s[i] != '"') {
            scan.end = kMalformed;
            return scan;
        }
        const std::size_t key_end = skip_string(s, i);
        if (key_end == kIncomplete) return scan;
        nlohmann::json key = nlohmann::json::parse(s.substr(i, key_end - i), nullptr, false);
        if (!key.is_string()) {
            scan.end = kMalformed;
            return scan;
        }
        i = skip_json_space(s, key_end);
        if (i >= s.size()) return scan;
        if (s[i] != ':') {
            scan.end = kMalformed;
            return scan;
        }
        i = skip_json_space(s, i + 1);
        if (i >= s.size()) return scan;
        MemberSpan member{key.get<std::string>(), i, kIncomplete};
        const std::size_t value_end = skip_json_value(s, i);
        if (value_end == kMalformed) {
            scan.end = kMalformed;
            return scan;
        }
        member.value_end = value_end;
        scan.members.push_back(std::move(member));
        if (value_end == kIncomplete) return scan;
        i = value_end;
    }
}

void CallObjectStreamer::emit_header(std::string name, std::vector<ToolCallDelta>& out) {
    ToolCallDelta delta;
    delta.index = index_;
    delta.id = make_id_();
    delta.name = std::move(name);
    out.push_back(std::move(delta));
    header_sent_ = true;
}

void CallObjectStreamer::emit_arguments(std::string text, std::vector<ToolCallDelta>& out) {
    if (text.empty()) return;
    // Merge with this call's fragment from the same feed, if any.
    if (!out.empty() && out.back().index == index_) {
        out.back().arguments += text;
        return;
    }
    ToolCallDelta delta;
    delta.index = index_;
    delta.arguments = std::move(text);
    out.push_back(std::move(delta));
}

CallObjectStreamer::Status CallObjectStreamer::feed(std::string_view text,
                                                    std::vector<ToolCallDelta>& out,
                                                    std::size_t* consumed) {
    const std::size_t before = buffer_.size();
    buffer_.append(text);
    const ObjectScan scan = scan_object(buffer_);
    if (scan.end == kMalformed) {
        *consumed = text.size();
        return header_sent_ ? Status::call : Status::not_a_call;
    }

    const MemberSpan* name = nullptr;
    const MemberSpan* arguments = nullptr;
    for (const auto& member : scan.members) {
        if (member.key == "name") name = &member;
        if (member.key == "arguments" || member.key == "parameters") arguments = &member;
    }

    if (!header_sent_ && name != nullptr && name->value_end != kIncomplete) {
        const nlohmann::json value =
            nlohmann::json::parse(std::string_view(buffer_).substr(
                                      name->value_begin, name->value_end - name->value_begin),
                                  nullptr, false);
        if (value.is_string()) {
            emit_header(value.get<std::string>(), out);
            // Stream the arguments as they arrive only when they come after the name and are an
            // object (the usual case); otherwise they are sent whole when the object closes.
            streaming_arguments_ = arguments == nullptr || buffer_[arguments->value_begin] == '{';
        }
    }
    if (header_sent_ && streaming_arguments_ && arguments != nullptr) {
        if (buffer_[arguments->value_begin] != '{') {
            streaming_arguments_ = false;
        } else {
            const std::size_t end =
                arguments->value_end == kIncomplete ? buffer_.size() : arguments->value_end;
            const std::size_t from = arguments->value_begin + arguments_sent_;
            if (end > from) {
                emit_arguments(buffer_.substr(from, end - from), out);
                arguments_sent_ = end - arguments->value_begin;
            }
        }
    }

    if (scan.end == kIncomplete) return Status::need_more;

    // The object closed: it must end in the newly fed text (it was incomplete before).
    *consumed = scan.end - before;
    buffer_.resize(scan.end);
    if (!header_sent_) {
        // Name after the arguments, or not a call at all.
        const nlohmann::json whole = nlohmann::json::parse(buffer_, nullptr, false);
        if (!whole.is_object() || !whole.contains("name") || !whole["name"].is_string()) {
            return Status::not_a_call;
        }
        emit_header(whole["name"].get<std::string>(), out);
    }
    if (arguments_sent_ == 0) {
        std::string args = "{}";
        if (arguments != nullptr) {
            const nlohmann::json value = nlohmann::json::parse(
                std::string_view(buffer_).substr(arguments->value_begin,
                                                 arguments->value_end - arguments->value_begin),
                nullptr, false);
            if (value.is_string()) {
                args = value.get<std::string>();  // arguments already encoded as a string
            } else if (!value.is_discarded()) {
                args = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            }
        }
        emit_arguments(std::move(args), out);
    }
    return Status::call;
}

ValueStreamer::Status ValueStreamer::feed(std::string_view text, int index,
                                          std::vector<ToolCallDelta>& out, std::size_t* consumed) {
    const std::size_t before = buffer_.size();
    buffer_.append(text);
    const std::size_t first = skip_json_space(buffer_, 0);
    if (first >= buffer_.size()) return Status::need_more;
    if (buffer_[first] != '{' && buffer_[first] != '[') return Status::malformed;
    const std::size_t end = skip_json_value(buffer_, first);
    if (end == kMalformed) return Status::malformed;
    const std::size_t available = end == kIncomplete ? buffer_.size() : end;
    const std::size_t from = first + sent_;
    if (available > from) {
        std::string fragment = buffer_.substr(from, available - from);
        if (!out.empty() && out.back().index == index) {
            out.back().arguments += fragment;
        } else {
            ToolCallDelta delta;
            delta.index = index;
            delta.arguments = std::move(fragment);
            out.push_back(std::move(delta));
        }
        sent_ = available - first;
    }
    if (end == kIncomplete) return Status::need_more;
    *consumed = end - before;
    return Status::done;
}

}  // namespace brigade::api::detail
