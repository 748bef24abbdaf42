#pragma once
// `pre_tokenizer` of tokenizer.json: cuts normalized text into pieces that the model encodes
// one by one. Types: ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit,
// BertPreTokenizer, Punctuation, CharDelimiterSplit, FixedLength, Sequence.
// Cite: huggingface/tokenizers:tokenizers/src/pre_tokenizers/*.rs and
// tokenizer/normalizer.rs (`NormalizedString::split` and its SplitDelimiterBehavior).

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/errors.hpp"
#include "model/text/tokenizer_regex.hpp"

namespace brigade::model::text {

// A piece of text on its way through the pipeline. `original_start` is where it began in the
// caller's text (Metaspace's `prepend_scheme: first` only prefixes the piece at offset 0).
struct Piece {
    std::string text;
    std::size_t original_start = 0;
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
enum class PrependScheme { always, first, never };

struct PreTokenizer {
    enum class Kind {
        sequence,
        byte_level,
        split,
        metaspace,
        digits,
        whitespace,
        whitespace_split,
        bert,
        punctuation,
        char_delimiter,
        fixed_length,
    };
    Kind kind = Kind::whitespace_split;
    std::vector<PreTokenizer> children;  // sequence
    TextPattern pattern;                 // split
    Regex regex;                         // byte_level (GPT-2 pattern) / whitespace
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;  // byte_level
    bool use_regex = true;          // byte_level
    std::string replacement;        // metaspace ("▁")
    PrependScheme prepend_scheme = PrependScheme::always;
    bool split = true;               // metaspace
    bool individual_digits = false;  // digits
    char32_t delimiter = 0;          // char_delimiter
    std::size_t length = 5;          // fixed_length

    // Replaces `pieces` by their pre-tokenized sub-pieces (empty pieces are dropped).
    void apply(std::vector<Piece>& pieces) const;
};

Result<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j);

// The fields Metaspace pre-tokenizer and decoder share. A missing `prepend_scheme` follows the
// legacy `add_prefix_space` (true → always, false → never).
struct MetaspaceFields {
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::always;
    bool split = true;
};
Result<MetaspaceFields> parse_metaspace_fields(const nlohmann::json& j, std::string_view what);

// GPT-2's pre-tokenizer pattern, built into ByteLevel (`use_regex: true`).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace brigade::model::text
