#pragma once
// `normalizer` of tokenizer.json: rewrites the text of each piece before pre-tokenization.
// Types: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, BertNormalizer,
// Nmt, ByteLevel, Precompiled (only with an empty charsmap), Sequence.
// Cite: huggingface/tokenizers:tokenizers/src/normalizers/*.rs.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/errors.hpp"
#include "model/text/tokenizer_regex.hpp"

namespace brigade::model::text {

struct Normalizer {
    enum class Kind {
        sequence,
        nfc,
        nfd,
        nfkc,
        nfkd,
        lowercase,
        strip,
        strip_accents,
        replace,
        prepend,
        bert,
        nmt,
        byte_level,
        identity,  // Precompiled with an empty charsmap
    };
    Kind kind = Kind::identity;
    std::vector<Normalizer> children;  // sequence
    TextPattern pattern;               // replace
    std::string content;               // replace / prepend
    bool left = false, right = false;  // strip
    // BertNormalizer
    bool clean_text = true, handle_chinese_chars = true, strip_accents = false, lowercase = true;

    std::string apply(std::string_view text) const;
};

// Parses one `normalizer` object; `null` is handled by the caller.
Result<Normalizer> parse_normalizer(const nlohmann::json& j);

}  // namespace brigade::model::text
