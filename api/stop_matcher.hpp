#pragma once
// Stop strings over a token stream (OpenAI `stop`). Text arrives in pieces that need not line
// up with the stop strings, so the matcher holds back any tail that could still be the start of
// a stop string, emits the rest, and at the first full match emits the text before it and
// stops. The stop text itself is never emitted. Sans-io and model-agnostic.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::api {

class StopMatcher {
public:
    // Empty strings are ignored (they would match everywhere).
    explicit StopMatcher(std::vector<std::string> stops);

    // Adds generated text; returns what may be emitted now. After a match it returns the text
    // before the match and `stopped()` becomes true; later calls return "".
    std::string feed(std::string_view text);

    // Generation ended another way (EOS, length): nothing can match any more, so the held-back
    // tail is released.
    std::string flush();

    bool stopped() const { return stopped_; }
    // The stop string that matched (empty until `stopped()`).
    const std::string& matched() const { return matched_; }
    // Bytes currently held back.
    std::size_t held_bytes() const { return pending_.size(); }

private:
    std::vector<std::string> stops_;
    std::string pending_;
    std::string matched_;
    bool stopped_ = false;
};

}  // namespace brigade::api
