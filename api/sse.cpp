#include "api/sse.hpp"

#include <utility>

namespace brigade::api {

std::string sse_event(std::string_view payload) {
    std::string out;
    out.reserve(payload.size() + 8);
    std::size_t start = 0;
    for (;;) {
        const std::size_t newline = payload.find('\n', start);
        out += "data: ";
        std::string_view line = payload.substr(
            start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        out += line;
        out += '\n';
        if (newline == std::string_view::npos) break;
        start = newline + 1;
    }
    out += '\n';
    return out;
}

std::string sse_comment(std::string_view text) {
    std::string out = ": ";
    for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
    out += "\n\n";
    return out;
}

bool SseOutbox::push(std::string_view bytes) {
    if (pending_.size() + bytes.size() > max_pending_bytes_) return false;
    pending_.append(bytes);
    return true;
}

std::string SseOutbox::take() { return std::exchange(pending_, {}); }

void SseParser::feed(std::string_view bytes, std::vector<SseMessage>& out) {
    for (char c : bytes) {
        if (c != '\n') {
            line_ += c;
            continue;
        }
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (line_.empty()) {  // blank line: dispatch
            if (has_data_) out.push_back(SseMessage{std::move(data_), false});
            data_.clear();
            has_data_ = false;
        } else if (line_[0] == ':') {
            std::string_view text = std::string_view(line_).substr(1);
            if (!text.empty() && text[0] == ' ') text.remove_prefix(1);
            out.push_back(SseMessage{std::string(text), true});
        } else if (line_.starts_with("data")) {
            std::string_view value = std::string_view(line_).substr(4);
            if (value.empty() || value[0] == ':') {
                if (!value.empty()) value.remove_prefix(1);
                if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
                if (has_data_) data_ += '\n';
                data_ += value;
                has_data_ = true;
            }
        }
        line_.clear();
    }
}

}  // namespace brigade::api
