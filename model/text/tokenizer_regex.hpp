#pragma once
// A compiled PCRE2 pattern with the semantics Hugging Face `tokenizers` gets from Oniguruma:
// Unicode-aware classes (`PCRE2_UTF | PCRE2_UCP`, so `\s` and `\p{L}` see all of Unicode),
// Perl leftmost-first alternation, lookahead. JIT-compiled when the platform allows it.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/errors.hpp"

namespace brigade::model::text {

// Half-open byte range [first, second) of a match.
using ByteSpan = std::pair<std::size_t, std::size_t>;

class Regex {
public:
    static Result<Regex> compile(std::string_view pattern);

    // All non-overlapping matches in `subject`, left to right. `subject` must be valid UTF-8.
    std::vector<ByteSpan> find_all(std::string_view subject) const;
    const std::string& pattern() const { return pattern_; }

private:
    struct Code;
    std::shared_ptr<const Code> code_;
    std::string pattern_;
};

// The `pattern` of Split / Replace: `{"String": s}` (found literally) or `{"Regex": r}`.
class TextPattern {
public:
    static TextPattern from_string(std::string s);
    static Result<TextPattern> from_regex(std::string_view pattern);

    // Non-overlapping matches, left to right (a literal empty string never matches).
    std::vector<ByteSpan> find_all(std::string_view subject) const;

private:
    bool is_regex_ = false;
    std::string literal_;
    Regex regex_;
};

}  // namespace brigade::model::text
