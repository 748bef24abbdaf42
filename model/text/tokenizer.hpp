#pragma once
// Hugging Face-compatible tokenizer: reads a model's `tokenizer.json` (or a Qwen2/GPT-2 style
// `vocab.json` + `merges.txt`) and encodes / decodes exactly as the `tokenizers` library does.
//
// Encode: added tokens cut out first (leftmost-longest) → normalizer → pre-tokenizer → BPE →
// post-processor (BOS etc., only with `add_special_tokens`). Decode: ids → token strings
// (special tokens optionally skipped) → decoder chain. See docs formats.md §4.
//
// `Tokenizer` is cheap to copy (its state is shared and immutable) and all const methods are
// safe to call from several threads at once.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/errors.hpp"

namespace brigade::model::text {

// Ids of the tokens that frame a sequence, gathered from tokenizer_config.json,
// generation_config.json and config.json.
struct SpecialTokens {
    std::optional<int32_t> bos, eos, eot, pad, unk;
    // Every id that ends generation: all EOS ids of the three files plus the end-of-turn token.
    std::vector<int32_t> stop_ids;
    std::string bos_token, eos_token, pad_token, unk_token;
    bool add_bos = false;  // encode(..., true) puts BOS first
    bool add_eos = false;  // encode(..., true) puts EOS last
};

struct TokenizerState;

class Tokenizer {
public:
    // Reads `dir/tokenizer.json`, or `vocab.json` + `merges.txt` when there is none, plus the
    // optional tokenizer_config.json, generation_config.json and config.json.
    static Result<Tokenizer> load_from_dir(const std::filesystem::path& dir);
    // From the text of tokenizer.json (and optionally tokenizer_config.json).
    static Result<Tokenizer> load_from_json(std::string_view tokenizer_json,
                                            std::string_view tokenizer_config_json = {});

    // Fails only on text that is not valid UTF-8.
    Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
    // Ids the tokenizer does not know are skipped. The result is always valid UTF-8.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

    int32_t vocab_size() const;  // one more than the largest id, added tokens included
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::string id_to_token(int32_t id) const;  // raw vocab string; "" for an unknown id
    bool is_special(int32_t id) const;
    const SpecialTokens& special() const;
    // Whether `id` is a `<0xXX>` token that the decoder joins with its neighbours into bytes
    // (SentencePiece byte fallback): such runs are only final once a non-byte token follows.
    bool is_byte_fallback_token(int32_t id) const;

private:
    explicit Tokenizer(std::shared_ptr<const TokenizerState> state) : state_(std::move(state)) {}
    std::shared_ptr<const TokenizerState> state_;
};

// Turns ids into text as they are generated. Text is released as soon as it is final: bytes of
// an incomplete UTF-8 character (split across byte-level tokens) wait for the rest, a run of
// `<0xXX>` byte-fallback tokens waits for its end (HF replaces every byte of a run that is not
// valid UTF-8 as a whole, so a later byte can change earlier ones), and SentencePiece's
// leading-space strip applies only at the start of the stream. All pieces concatenated equal
// `decode` of all ids.
class StreamingDecoder {
public:
    explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
    // Text that became final with `id` (often empty while a character is incomplete).
    std::string push(int32_t id);
    // Whatever is still held back (an incomplete character becomes U+FFFD); resets the stream.
    std::string finish();

private:
    Tokenizer tokenizer_;
    bool skip_special_;
    std::vector<int32_t> window_;  // ids since the last point text was released, plus context
    std::string window_text_;      // decode of window_[0, context_) already released
    std::size_t context_ = 0;
    bool in_byte_run_ = false;  // the last id that decodes to something was a <0xXX> token
};

}  // namespace brigade::model::text
