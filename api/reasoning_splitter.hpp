#pragma once
// Routes a reasoning model's `<think>…</think>` text to `reasoning_content` and the rest to
// `content`, for streamed pieces that may split the tags anywhere. The opening tag is recognised
// only at the start of the output (after whitespace): that is where Qwen3 / DeepSeek-R1 / QwQ put
// it. When the chat template already opened `<think>` in the generation prompt (DeepSeek-R1's
// `<｜Assistant｜><think>\n`), start with `starts_in_reasoning`: the output then begins inside the
// reasoning and only `</think>` is expected. Whitespace right after either tag and right before
// `</think>` is dropped, as llama.cpp does.

#include <string>
#include <string_view>

namespace brigade::api {

struct ReasoningOptions {
    std::string open_tag = "<think>";
    std::string close_tag = "</think>";
    bool starts_in_reasoning = false;
};

struct SplitText {
    std::string content;
    std::string reasoning;
};

class ReasoningSplitter {
public:
    explicit ReasoningSplitter(ReasoningOptions options = {});

    void feed(std::string_view text, SplitText& out);
    // End of output: releases held-back text (an unclosed reasoning block stays reasoning).
    void flush(SplitText& out);

    // True while text goes (or may go) to reasoning: services count reasoning tokens with it.
    bool in_reasoning() const { return state_ == State::reasoning; }

private:
    enum class State { start, reasoning, content };

    void feed_reasoning(SplitText& out);
    void feed_content(std::string_view text, SplitText& out);

    ReasoningOptions options_;
    State state_ = State::start;
    std::string pending_;        // start: text so far; reasoning: held-back tail
    bool trim_leading_ = false;  // drop whitespace at the start of the current part
};

// True if a rendered generation prompt ends inside an opened reasoning block, e.g. DeepSeek-R1's
// "...<｜Assistant｜><think>\n" (so the output starts in reasoning).
bool prompt_opens_reasoning(std::string_view rendered_prompt, std::string_view open_tag = "<think>",
                            std::string_view close_tag = "</think>");

}  // namespace brigade::api
