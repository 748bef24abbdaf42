#include "api/reasoning_splitter.hpp"

#include <algorithm>
#include <utility>

namespace brigade::api {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::size_t skip_space(std::string_view s, std::size_t i = 0) {
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
}

// Longest k < tag.size() such that s ends with tag[0, k).
std::size_t partial_tag_tail(std::string_view s, std::string_view tag) {
    for (std::size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k) {
        if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
    }
    return 0;
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(ReasoningOptions options) : options_(std::move(options)) {
    if (options_.starts_in_reasoning) {
        state_ = State::reasoning;
        trim_leading_ = true;
    }
}

void ReasoningSplitter::feed(std::string_view text, SplitText& out) {
    switch (state_) {
        case State::start: {
            pending_.append(text);
            const std::size_t first = skip_space(pending_);
            const std::string_view rest = std::string_view(pending_).substr(first);
            const std::string_view open = options_.open_tag;
            if (rest.size() < open.size() && open.substr(0, rest.size()) == rest) {
                return;  // still maybe the opening tag (or only whitespace so far)
            }
            if (rest.substr(0, open.size()) == open) {
                std::string after(rest.substr(open.size()));
                pending_.clear();
                state_ = State::reasoning;
                trim_leading_ = true;
                pending_ = std::move(after);
                feed_reasoning(out);
                return;
            }
            state_ = State::content;
            std::string all = std::exchange(pending_, {});
            feed_content(all, out);
            return;
        }
        case State::reasoning:
            pending_.append(text);
            feed_reasoning(out);
            return;
        case State::content:
            feed_content(text, out);
            return;
    }
}

void ReasoningSplitter::feed_reasoning(SplitText& out) {
    if (trim_leading_) {
        const std::size_t first = skip_space(pending_);
        pending_.erase(0, first);
        if (pending_.empty()) return;
        trim_leading_ = false;
    }
    const std::size_t close = pending_.find(options_.close_tag);
    if (close != std::string::npos) {
        std::string_view reasoning = std::string_view(pending_).substr(0, close);
        while (!reasoning.empty() && is_space(reasoning.back())) reasoning.remove_suffix(1);
        out.reasoning.append(reasoning);
        std::string after = pending_.substr(close + options_.close_tag.size());
        pending_.clear();
        state_ = State::content;
        trim_leading_ = true;
        feed_content(after, out);
        return;
    }
    // Hold back a possible partial closing tag and trailing whitespace (dropped if the tag
    // follows, emitted if more reasoning does).
    std::size_t keep = partial_tag_tail(pending_, options_.close_tag);
    std::size_t end = pending_.size() - keep;
    while (end > 0 && is_space(pending_[end - 1])) --end;
    out.reasoning.append(pending_, 0, end);
    pending_.erase(0, end);
}

void ReasoningSplitter::feed_content(std::string_view text, SplitText& out) {
    if (trim_leading_) {
        text.remove_prefix(skip_space(text));
        if (text.empty()) return;
        trim_leading_ = false;
    }
    out.content.append(text);
}

void ReasoningSplitter::flush(SplitText& out) {
    switch (state_) {
        case State::start:
            out.content.append(pending_);
            break;
        case State::reasoning:
            if (!trim_leading_) out.reasoning.append(pending_);
            break;
        case State::content:
            break;
    }
    pending_.clear();
}

bool prompt_opens_reasoning(std::string_view rendered_prompt, std::string_view open_tag,
                            std::string_view close_tag) {
    const std::size_t open = rendered_prompt.rfind(open_tag);
    if (open == std::string_view::npos) return false;
    const std::size_t close = rendered_prompt.rfind(close_tag);
    if (close != std::string_view::npos && close > open) return false;
    // Only whitespace may follow the opening tag.
    return skip_space(rendered_prompt, open + open_tag.size()) == rendered_prompt.size();
}

}  // namespace brigade::api
