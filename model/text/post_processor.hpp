#pragma once
// `post_processor` of tokenizer.json, reduced to what single-sequence inference needs: the ids
// put before and after the encoded text when special tokens are requested. Types:
// TemplateProcessing, ByteLevel (offsets only: adds nothing), RobertaProcessing,
// BertProcessing, Sequence. Cite: huggingface/tokenizers:tokenizers/src/processors/*.rs.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "model/errors.hpp"

namespace brigade::model::text {

struct PostProcessor {
    std::vector<int32_t> prefix;  // ids before the text, e.g. BOS
    std::vector<int32_t> suffix;  // ids after it, e.g. EOS for BERT-like models
};

Result<PostProcessor> parse_post_processor(const nlohmann::json& j);

}  // namespace brigade::model::text
