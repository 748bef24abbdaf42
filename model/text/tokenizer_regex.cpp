#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/text/tokenizer_regex.hpp"

#include <pcre2.h>

#include "model/text/unicode.hpp"

namespace brigade::model::text {

struct Regex::Code {
    pcre2_code* code = nullptr;
    explicit Code(pcre2_code* c) : code(c) {}
    ~Code() { pcre2_code_free(code); }
    Code(const Code&) = delete;
    Code& operator=(const Code&) = delete;
};

Result<Regex> Regex::compile(std::string_view pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (code == nullptr) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error_code, message, sizeof(message));
        return make_error(errc::bad_tokenizer, "cannot compile regex '" + std::string(pattern) +
                                                   "' at offset " + std::to_string(error_offset) +
                                                   ": " + reinterpret_cast<const char*>(message));
    }
    // JIT makes pre-tokenization several times faster; without it PCRE2 interprets, same result.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    Regex r;
    r.code_ = std::make_shared<const Code>(code);
    r.pattern_ = std::string(pattern);
    return r;
}

std::vector<ByteSpan> Regex::find_all(std::string_view subject) const {
    std::vector<ByteSpan> out;
    if (!code_) return out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
    if (md == nullptr) return out;
    auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
    std::size_t start = 0;
    // The subject was validated once by the caller; re-checking it on every call would make
    // iterating over a long prompt quadratic.
    while (start <= subject.size()) {
        int rc =
            pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            // JIT stack exhausted or a similar resource limit: the interpreter (heap-based
            // backtracking) gives the same answer, only slower.
            rc = pcre2_match(code_->code, data, subject.size(), start,
                             PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        }
        // Still failing: what is left stays one unsplit segment for the caller.
        if (rc < 0) break;
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        std::size_t b = ov[0], e = ov[1];
        if (e < b) break;  // \K tricks; patterns we load never do this
        out.emplace_back(b, e);
        if (e == b) {
            // Empty match: step over one code point so the scan makes progress.
            if (e >= subject.size()) break;
            start = e + utf8_sequence_length(static_cast<unsigned char>(subject[e]));
        } else {
            start = e;
        }
    }
    pcre2_match_data_free(md);
    return out;
}

TextPattern TextPattern::from_string(std::string s) {
    TextPattern p;
    p.literal_ = std::move(s);
    return p;
}

Result<TextPattern> TextPattern::from_regex(std::string_view pattern) {
    auto r = Regex::compile(pattern);
    if (!r) return r.error();
    TextPattern p;
    p.is_regex_ = true;
    p.regex_ = std::move(*r);
    return p;
}

std::vector<ByteSpan> TextPattern::find_all(std::string_view subject) const {
    if (is_regex_) return regex_.find_all(subject);
    std::vector<ByteSpan> out;
    if (literal_.empty()) return out;
    std::size_t pos = 0;
    while ((pos = subject.find(literal_, pos)) != std::string_view::npos) {
        out.emplace_back(pos, pos + literal_.size());
        pos += literal_.size();
    }
    return out;
}

}  // namespace brigade::model::text
