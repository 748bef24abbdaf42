#pragma once
// `decoder` of tokenizer.json: turns token strings back into text. Each step maps a list of
// token strings to a new list (HF's `decode_chain`); the result is their concatenation.
// Types: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, BPEDecoder, WordPiece,
// Sequence. Cite: huggingface/tokenizers:tokenizers/src/decoders/*.rs.

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "model/text/pre_tokenizers.hpp"
#include "model/text/tokenizer_regex.hpp"

namespace brigade::model::text {

struct Decoder {
    enum class Kind {
        sequence,
        byte_level,
        byte_fallback,
        fuse,
        strip,
        replace,
        metaspace,
        bpe,
        word_piece,
    };
    Kind kind = Kind::fuse;
    std::vector<Decoder> children;    // sequence
    TextPattern pattern;              // replace
    std::string content;              // replace: replacement; strip: the stripped char
    std::size_t start = 0, stop = 0;  // strip
    std::string replacement;          // metaspace
    PrependScheme prepend_scheme = PrependScheme::always;
    std::string affix;    // bpe: suffix; word_piece: prefix
    bool cleanup = true;  // word_piece

    void decode_chain(std::vector<std::string>& tokens) const;
};

Result<Decoder> parse_decoder(const nlohmann::json& j);

// Joins `tokens` after running `decoder` (or with spaces when there is none, as HF does).
std::string run_decoder(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace brigade::model::text
