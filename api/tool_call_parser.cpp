#include "api/tool_call_parser.hpp"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "api/tool_call_json.hpp"

namespace brigade::api {

using detail::CallObjectStreamer;
using detail::is_json_space;
using detail::skip_json_space;
using detail::ValueStreamer;

namespace {

// Longest k < tag.size() such that s ends with tag[0, k): a tag that may be split.
std::size_t partial_tag_tail(std::string_view s, std::string_view tag) {
    for (std::size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k) {
        if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
    }
    return 0;
}

bool is_proper_prefix(std::string_view s, std::string_view tag) {
    return s.size() < tag.size() && tag.substr(0, s.size()) == s;
}

void drop_leading_space(std::string& s) { s.erase(0, skip_json_space(s, 0)); }

// Shared by the parsers: content output that can drop the whitespace models put between calls.
class ContentEmitter {
public:
    void emit(std::string_view text, ToolParseOutput& out) {
        if (suppress_space_) {
            text.remove_prefix(std::min(text.size(), skip_json_space(text, 0)));
            if (text.empty()) return;
            suppress_space_ = false;
        }
        out.content.append(text);
    }
    void suppress_leading_space() { suppress_space_ = true; }

private:
    bool suppress_space_ = false;
};

class PlainParser final : public ToolCallParser {
public:
    void feed(std::string_view text, ToolParseOutput& out) override { out.content.append(text); }
    void flush(ToolParseOutput&) override {}
    int n_calls() const override { return 0; }
};

// Qwen / Hermes: <tool_call>{…}</tool_call>, anywhere in the output.
class HermesParser final : public ToolCallParser {
public:
    explicit HermesParser(ToolCallIdGenerator make_id) : make_id_(std::move(make_id)) {}

    void feed(std::string_view text, ToolParseOutput& out) override {
        pending_.append(text);
        for (;;) {
            if (state_ == State::content) {
                const std::size_t tag = pending_.find(kOpen);
                if (tag != std::string::npos) {
                    content_.emit(std::string_view(pending_).substr(0, tag), out);
                    pending_.erase(0, tag + kOpen.size());
                    state_ = State::call;
                    call_.reset();
                    continue;
                }
                const std::size_t hold = partial_tag_tail(pending_, kOpen);
                content_.emit(std::string_view(pending_).substr(0, pending_.size() - hold), out);
                pending_.erase(0, pending_.size() - hold);
                return;
            }
            if (state_ == State::call) {
                if (!call_) {
                    const std::size_t first = skip_json_space(pending_, 0);
                    if (first == pending_.size()) return;  // only whitespace so far
                    if (pending_[first] != '{') {          // not JSON: give the tag back as text
                        content_.emit(kOpen, out);
                        state_ = State::content;
                        continue;
                    }
                    pending_.erase(0, first);
                    call_.emplace(n_calls_, make_id_);
                }
                std::size_t consumed = 0;
                const auto status = call_->feed(pending_, out.tool_calls, &consumed);
                if (status == CallObjectStreamer::Status::need_more) {
                    pending_.clear();
                    return;
                }
                std::string rest = pending_.substr(consumed);
                if (status == CallObjectStreamer::Status::call) {
                    ++n_calls_;
                    state_ = State::after_call;
                } else {
                    content_.emit(std::string(kOpen) + call_->buffer(), out);
                    state_ = State::content;
                }
                call_.reset();
                pending_ = std::move(rest);
                continue;
            }
            // after_call: expect </tool_call>, leniently.
            drop_leading_space(pending_);
            if (pending_.empty()) return;
            if (is_proper_prefix(pending_, kClose)) return;
            if (pending_.starts_with(kClose)) pending_.erase(0, kClose.size());
            content_.suppress_leading_space();
            state_ = State::content;
        }
    }

    void flush(ToolParseOutput& out) override {
        if (state_ == State::content) {
            content_.emit(pending_, out);
        } else if (state_ == State::call && !(call_ && call_->emitted())) {
            content_.emit(std::string(kOpen) + (call_ ? call_->buffer() : std::string()) + pending_,
                          out);
        }
        pending_.clear();
        call_.reset();
    }

    int n_calls() const override { return n_calls_ + (call_ && call_->emitted() ? 1 : 0); }

private:
    static constexpr std::string_view kOpen = "<tool_call>";
    static constexpr std::string_view kClose = "</tool_call>";
    enum class State { content, call, after_call };

    ToolCallIdGenerator make_id_;
    State state_ = State::content;
    std::string pending_;
    std::optional<CallObjectStreamer> call_;
    ContentEmitter content_;
    int n_calls_ = 0;
};

// Llama 3.x: the whole output is one or more JSON calls, maybe after <|python_tag|>.
class Llama3Parser final : public ToolCallParser {
public:
    explicit Llama3Parser(ToolCallIdGenerator make_id) : make_id_(std::move(make_id)) {}

    void feed(std::string_view text, ToolParseOutput& out) override {
        if (state_ == State::content) {
            out.content.append(text);
            return;
        }
        pending_.append(text);
        for (;;) {
            switch (state_) {
                case State::content:
                    out.content.append(pending_);
                    pending_.clear();
                    return;
                case State::start:
                case State::between: {
                    const bool at_start = state_ == State::start;
                    std::size_t i = 0;
                    while (i < pending_.size() &&
                           (is_json_space(pending_[i]) || (!at_start && pending_[i] == ';'))) {
                        ++i;
                    }
                    const std::string_view rest = std::string_view(pending_).substr(i);
                    if (rest.empty() || is_proper_prefix(rest, kPythonTag)) return;
                    if (rest.starts_with(kPythonTag)) {
                        pending_.erase(0, i + kPythonTag.size());
                        state_ = State::call_begin;
                        continue;
                    }
                    if (rest[0] == '{') {
                        pending_.erase(0, i);
                        state_ = State::call_begin;
                        continue;
                    }
                    if (!at_start) pending_.erase(0, i);
                    state_ = State::content;
                    continue;
                }
                case State::call_begin:
                    drop_leading_space(pending_);
                    if (pending_.empty()) return;
                    if (pending_[0] != '{') {  // e.g. a built-in tool in Python syntax: content
                        state_ = State::content;
                        continue;
                    }
                    call_.emplace(n_calls_, make_id_);
                    state_ = State::call;
                    continue;
                case State::call: {
                    if (!call_->emitted() && !looks_like_call(call_->buffer() + pending_)) {
                        // A JSON answer, not a call: stop holding it back.
                        out.content.append(call_->buffer());
                        call_.reset();
                        state_ = State::content;
                        continue;
                    }
                    std::size_t consumed = 0;
                    auto status = call_->feed(pending_, out.tool_calls, &consumed);
                    if (status == CallObjectStreamer::Status::need_more) {
                        pending_.clear();
                        return;
                    }
                    std::string rest = pending_.substr(consumed);
                    if (status == CallObjectStreamer::Status::call) {
                        ++n_calls_;
                        state_ = State::between;
                    } else {
                        out.content.append(call_->buffer());
                        state_ = State::content;
                    }
                    call_.reset();
                    pending_ = std::move(rest);
                    continue;
                }
            }
        }
    }

    void flush(ToolParseOutput& out) override {
        if (state_ == State::call && call_ && !call_->emitted()) {
            out.content.append(call_->buffer());
        }
        if (state_ == State::start || state_ == State::content) out.content.append(pending_);
        pending_.clear();
        call_.reset();
    }

    int n_calls() const override { return n_calls_ + (call_ && call_->emitted() ? 1 : 0); }

private:
    static constexpr std::string_view kPythonTag = "<|python_tag|>";
    enum class State { start, call_begin, call, between, content };

    // Until the first key is known, an object may be a call; a first key other than these
    // means it is the answer itself.
    static bool looks_like_call(std::string_view buffer) {
        const detail::ObjectScan scan = detail::scan_object(buffer);
        if (scan.end == detail::kMalformed) return false;
        if (scan.members.empty()) return true;
        const std::string& key = scan.members.front().key;
        return key == "name" || key == "type" || key == "parameters" || key == "arguments";
    }

    ToolCallIdGenerator make_id_;
    State state_ = State::start;
    std::string pending_;
    std::optional<CallObjectStreamer> call_;
    int n_calls_ = 0;
};

// Mistral: [TOOL_CALLS][{…}, …] or [TOOL_CALLS]name[CALL_ID]id[ARGS]{…}.
class MistralParser final : public ToolCallParser {
public:
    explicit MistralParser(ToolCallIdGenerator make_id) : make_id_(std::move(make_id)) {}

    void feed(std::string_view text, ToolParseOutput& out) override {
        pending_.append(text);
        for (;;) {
            switch (state_) {
                case State::content: {
                    const std::size_t tag = pending_.find(kTag);
                    if (tag != std::string::npos) {
                        content_.emit(std::string_view(pending_).substr(0, tag), out);
                        pending_.erase(0, tag + kTag.size());
                        state_ = State::after_tag;
                        continue;
                    }
                    const std::size_t hold = partial_tag_tail(pending_, kTag);
                    content_.emit(std::string_view(pending_).substr(0, pending_.size() - hold),
                                  out);
                    pending_.erase(0, pending_.size() - hold);
                    return;
                }
                case State::after_tag:
                    drop_leading_space(pending_);
                    if (pending_.empty()) return;
                    if (pending_[0] == '[') {
                        pending_.erase(0, 1);
                        state_ = State::array;
                    } else {
                        state_ = State::name;
                    }
                    continue;
                case State::array: {
                    std::size_t i = 0;
                    while (i < pending_.size() &&
                           (is_json_space(pending_[i]) || pending_[i] == ',')) {
                        ++i;
                    }
                    pending_.erase(0, i);
                    if (pending_.empty()) return;
                    if (pending_[0] == ']') {
                        pending_.erase(0, 1);
                        content_.suppress_leading_space();
                        state_ = State::content;
                        continue;
                    }
                    if (pending_[0] != '{') {
                        state_ = State::content;
                        continue;
                    }
                    call_.emplace(n_calls_, make_id_);
                    state_ = State::array_call;
                    continue;
                }
                case State::array_call: {
                    std::size_t consumed = 0;
                    auto status = call_->feed(pending_, out.tool_calls, &consumed);
                    if (status == CallObjectStreamer::Status::need_more) {
                        pending_.clear();
                        return;
                    }
                    std::string rest = pending_.substr(consumed);
                    if (status == CallObjectStreamer::Status::call) {
                        ++n_calls_;
                        state_ = State::array;
                    } else {
                        content_.emit(call_->buffer(), out);
                        state_ = State::content;
                    }
                    call_.reset();
                    pending_ = std::move(rest);
                    continue;
                }
                case State::name:
                case State::call_id: {
                    const std::size_t args = pending_.find(kArgs);
                    const std::size_t call_id =
                        state_ == State::name ? pending_.find(kCallId) : std::string::npos;
                    if (call_id != std::string::npos && call_id < args) {
                        name_ = trimmed(std::string_view(pending_).substr(0, call_id));
                        pending_.erase(0, call_id + kCallId.size());
                        state_ = State::call_id;
                        continue;
                    }
                    if (args != std::string::npos) {
                        std::string before = trimmed(std::string_view(pending_).substr(0, args));
                        pending_.erase(0, args + kArgs.size());
                        ToolCallDelta header;
                        header.index = n_calls_;
                        if (state_ == State::call_id && !before.empty()) {
                            header.id = std::move(before);
                        } else {
                            name_ = std::move(before);
                            header.id = make_id_();
                        }
                        header.name = name_;
                        out.tool_calls.push_back(std::move(header));
                        header_sent_ = true;
                        value_.emplace();
                        state_ = State::args;
                        continue;
                    }
                    // A function name is short and plain; anything else was not a call.
                    if (pending_.size() > kMaxNameBytes ||
                        pending_.find_first_of("{\n") != std::string::npos) {
                        content_.emit(std::string(kTag) + pending_, out);
                        pending_.clear();
                        state_ = State::content;
                    }
                    return;
                }
                case State::args: {
                    std::size_t consumed = 0;
                    auto status = value_->feed(pending_, n_calls_, out.tool_calls, &consumed);
                    if (status == ValueStreamer::Status::need_more) {
                        pending_.clear();
                        return;
                    }
                    if (status == ValueStreamer::Status::malformed) {
                        // The header is out: close the call with empty arguments.
                        ToolCallDelta fix;
                        fix.index = n_calls_;
                        fix.arguments = "{}";
                        out.tool_calls.push_back(std::move(fix));
                        consumed = 0;
                    }
                    std::string rest = pending_.substr(consumed);
                    ++n_calls_;
                    header_sent_ = false;
                    value_.reset();
                    content_.suppress_leading_space();
                    state_ = State::content;
                    pending_ = std::move(rest);
                    continue;
                }
            }
        }
    }

    void flush(ToolParseOutput& out) override {
        switch (state_) {
            case State::content:
                content_.emit(pending_, out);
                break;
            case State::name:
            case State::after_tag:
                content_.emit(std::string(kTag) + pending_, out);
                break;
            case State::array_call:
                if (call_ && !call_->emitted()) content_.emit(call_->buffer(), out);
                break;
            default:
                break;
        }
        pending_.clear();
        call_.reset();
        value_.reset();
    }

    int n_calls() const override {
        return n_calls_ + ((call_ && call_->emitted()) || header_sent_ ? 1 : 0);
    }

private:
    static constexpr std::string_view kTag = "[TOOL_CALLS]";
    static constexpr std::string_view kArgs = "[ARGS]";
    static constexpr std::string_view kCallId = "[CALL_ID]";
    static constexpr std::size_t kMaxNameBytes = 256;
    enum class State { content, after_tag, array, array_call, name, call_id, args };

    static std::string trimmed(std::string_view s) {
        s.remove_prefix(std::min(s.size(), skip_json_space(s, 0)));
        while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
        return std::string(s);
    }

    ToolCallIdGenerator make_id_;
    State state_ = State::content;
    std::string pending_;
    std::string name_;
    std::optional<CallObjectStreamer> call_;
    std::optional<ValueStreamer> value_;
    ContentEmitter content_;
    bool header_sent_ = false;
    int n_calls_ = 0;
};

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
    if (name == "none") return ToolCallFormat::none;
    if (name == "hermes" || name == "qwen") return ToolCallFormat::hermes;
    if (name == "llama3" || name == "llama") return ToolCallFormat::llama3;
    if (name == "mistral") return ToolCallFormat::mistral;
    return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
    switch (format) {
        case ToolCallFormat::none:
            return "none";
        case ToolCallFormat::hermes:
            return "hermes";
        case ToolCallFormat::llama3:
            return "llama3";
        case ToolCallFormat::mistral:
            return "mistral";
    }
    return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view chat_template) {
    if (chat_template.find("[TOOL_CALLS]") != std::string_view::npos) {
        return ToolCallFormat::mistral;
    }
    if (chat_template.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::hermes;
    if (chat_template.find("<|python_tag|>") != std::string_view::npos ||
        (chat_template.find("<|start_header_id|>") != std::string_view::npos &&
         chat_template.find("\"parameters\"") != std::string_view::npos)) {
        return ToolCallFormat::llama3;
    }
    return ToolCallFormat::none;
}

ToolCallIdGenerator make_tool_call_id_generator(ToolCallFormat format, std::uint64_t seed) {
    static constexpr std::string_view kAlphabet =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const bool mistral = format == ToolCallFormat::mistral;
    auto rng = std::make_shared<std::mt19937_64>(seed);
    return [rng, mistral]() {
        std::string id = mistral ? "" : "call_";
        const int n = mistral ? 9 : 24;
        for (int i = 0; i < n; ++i) id.push_back(kAlphabet[(*rng)() % kAlphabet.size()]);
        return id;
    };
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format,
                                                      ToolCallIdGenerator make_id) {
    switch (format) {
        case ToolCallFormat::hermes:
            return std::make_unique<HermesParser>(std::move(make_id));
        case ToolCallFormat::llama3:
            return std::make_unique<Llama3Parser>(std::move(make_id));
        case ToolCallFormat::mistral:
            return std::make_unique<MistralParser>(std::move(make_id));
        case ToolCallFormat::none:
            break;
    }
    return std::make_unique<PlainParser>();
}

}  // namespace brigade::api
