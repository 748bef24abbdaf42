// StreamingDecoder: decodes a sliding window of ids and releases the new text.
//
// Why a window rather than per-token strings: decoders are not per-token functions. ByteLevel
// and ByteFallback join bytes across tokens into one character, and SentencePiece's Strip /
// Metaspace treat the first token differently. Decoding [context ids + new ids] and removing
// the already-released decode of [context ids] keeps those effects identical to a full decode,
// because the window always starts at a token where earlier text was complete (the approach of
// HF's `DecodeStream`). Text that ends in U+FFFD may be an incomplete character, so it waits
// for the next id or for `finish()`; so does a run of byte-fallback tokens, whose bytes HF
// validates together.

#include "model/text/tokenizer.hpp"
#include "model/text/unicode.hpp"

namespace brigade::model::text {
namespace {

bool ends_with_replacement(const std::string& s) {
    return s.size() >= kReplacementChar.size() &&
           s.compare(s.size() - kReplacementChar.size(), kReplacementChar.size(),
                     kReplacementChar) == 0;
}

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamingDecoder::push(int32_t id) {
    window_.push_back(id);
    if (tokenizer_.is_byte_fallback_token(id)) {
        in_byte_run_ = true;
        return {};
    }
    // Ids that decode to nothing (unknown, or special and skipped) do not end a byte run:
    // decode drops them before the ByteFallback step joins its neighbours.
    const bool dropped =
        tokenizer_.id_to_token(id).empty() || (skip_special_ && tokenizer_.is_special(id));
    if (dropped && in_byte_run_) return {};
    in_byte_run_ = false;
    std::string text = tokenizer_.decode(window_, skip_special_);
    if (text.size() <= window_text_.size() || ends_with_replacement(text)) return {};
    if (text.compare(0, window_text_.size(), window_text_) != 0) {
        // The decoders we support never rewrite released text; if one did, restart the window
        // here rather than emit text twice.
        window_.assign(1, id);
        context_ = 1;
        window_text_ = tokenizer_.decode(window_, skip_special_);
        return {};
    }
    std::string fresh = text.substr(window_text_.size());
    // Keep the ids released by this call as context for the next one.
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_));
    context_ = window_.size();
    window_text_ = tokenizer_.decode(window_, skip_special_);
    return fresh;
}

std::string StreamingDecoder::finish() {
    std::string text = tokenizer_.decode(window_, skip_special_);
    std::string rest = text.size() > window_text_.size() ? text.substr(window_text_.size()) : "";
    window_.clear();
    window_text_.clear();
    context_ = 0;
    in_byte_run_ = false;
    return rest;
}

}  // namespace brigade::model::text
