#pragma once
// The immutable state behind `Tokenizer` (internal to model/text).

#include <memory>
#include <optional>

#include "model/text/added_tokens.hpp"
#include "model/text/bpe.hpp"
#include "model/text/decoders.hpp"
#include "model/text/normalizers.hpp"
#include "model/text/post_processor.hpp"
#include "model/text/pre_tokenizers.hpp"
#include "model/text/tokenizer.hpp"

namespace brigade::model::text {

struct TokenizerState {
    AddedVocabulary added;
    std::optional<Normalizer> normalizer;
    std::optional<PreTokenizer> pre_tokenizer;
    BpeModel model;
    std::optional<PostProcessor> post_processor;
    std::optional<Decoder> decoder;
    SpecialTokens special;
    // tokenizer_config.json `split_special_tokens`: special tokens in the input are plain text.
    bool split_special_tokens = false;
    // The decoder chain contains ByteFallback.
    bool decoder_has_byte_fallback = false;
    int32_t vocab_size = 0;
};

}  // namespace brigade::model::text
