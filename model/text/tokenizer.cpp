#include "model/text/tokenizer.hpp"

#include "model/text/tokenizer_state.hpp"
#include "model/text/utf8.hpp"

namespace brigade::model::text {
namespace {

// Pre-tokens repeat a lot in real text ("the", " of", "\n"); within one call, a repeated piece
// copies the ids it got the first time instead of running BPE again. Values are (offset,
// length) into the output vector, which already holds those ids.
using PieceCache =
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>;

void encode_piece(const BpeModel& model, std::string_view piece, PieceCache& cache,
                  std::vector<int32_t>& ids) {
    if (auto it = cache.find(piece); it != cache.end()) {
        auto [offset, length] = it->second;
        for (uint32_t k = 0; k < length; ++k) {
            int32_t id = ids[offset + k];
            ids.push_back(id);
        }
        return;
    }
    auto offset = static_cast<uint32_t>(ids.size());
    model.encode(piece, ids);
    cache.emplace(piece, std::make_pair(offset, static_cast<uint32_t>(ids.size()) - offset));
}

}  // namespace

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               bool add_special_tokens) const {
    const TokenizerState& st = *state_;
    if (auto bad = find_invalid_utf8(text); bad != text.size()) {
        return make_error(
            errc::bad_input_text,
            "text is not valid UTF-8 (first bad byte at offset " + std::to_string(bad) + ")");
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    if (add_special_tokens && st.post_processor) {
        ids.insert(ids.end(), st.post_processor->prefix.begin(), st.post_processor->prefix.end());
    }
    PieceCache cache;
    std::vector<TextSegment> raw_segments, normalized_segments;
    std::vector<Piece> pieces;
    st.added.split(text, /*want_normalized=*/false, st.split_special_tokens, raw_segments);
    for (const auto& seg : raw_segments) {
        if (seg.id >= 0) {
            ids.push_back(seg.id);
            continue;
        }
        std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
        std::string normalized = st.normalizer ? st.normalizer->apply(part) : std::string(part);
        normalized_segments.clear();
        st.added.split(normalized, /*want_normalized=*/true, st.split_special_tokens,
                       normalized_segments);
        for (const auto& ns : normalized_segments) {
            if (ns.id >= 0) {
                ids.push_back(ns.id);
                continue;
            }
            if (ns.end == ns.begin) continue;
            pieces.clear();
            pieces.push_back(
                {normalized.substr(ns.begin, ns.end - ns.begin), seg.begin + ns.begin});
            if (st.pre_tokenizer) st.pre_tokenizer->apply(pieces);
            for (const auto& p : pieces) encode_piece(st.model, p.text, cache, ids);
        }
    }
    if (add_special_tokens && st.post_processor) {
        ids.insert(ids.end(), st.post_processor->suffix.begin(), st.post_processor->suffix.end());
    }
    return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    const TokenizerState& st = *state_;
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        if (const AddedToken* a = st.added.by_id(id)) {
            if (skip_special_tokens && a->special) continue;
            tokens.push_back(a->content);
        } else if (const std::string* t = st.model.id_to_token(id)) {
            tokens.push_back(*t);
        }
    }
    return run_decoder(st.decoder ? &*st.decoder : nullptr, std::move(tokens));
}

int32_t Tokenizer::vocab_size() const { return state_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (const AddedToken* a = state_->added.by_content(token)) return a->id;
    return state_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
    if (const AddedToken* a = state_->added.by_id(id)) return a->content;
    if (const std::string* t = state_->model.id_to_token(id)) return *t;
    return {};
}

bool Tokenizer::is_special(int32_t id) const {
    const AddedToken* a = state_->added.by_id(id);
    return a != nullptr && a->special;
}

const SpecialTokens& Tokenizer::special() const { return state_->special; }

bool Tokenizer::is_byte_fallback_token(int32_t id) const {
    if (!state_->decoder_has_byte_fallback || state_->added.by_id(id) != nullptr) return false;
    const std::string* t = state_->model.id_to_token(id);
    return t != nullptr && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

}  // namespace brigade::model::text
