#pragma once
// Added tokens (`added_tokens` of tokenizer.json, `added_tokens_decoder` of
// tokenizer_config.json): strings that are cut out of the input before normalization and
// pre-tokenization and map straight to their id. Matching is leftmost-longest, as HF's
// Aho-Corasick automaton with `MatchKind::LeftmostLongest`; `single_word`, `lstrip` and
// `rstrip` then adjust or discard each match.
// Cite: huggingface/tokenizers:tokenizers/src/tokenizer/added_vocabulary.rs (`find_matches`).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace brigade::model::text {

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
};

// A stretch of the input: an added token (`id >= 0`) or text to tokenize (`id == -1`).
struct TextSegment {
    int32_t id = -1;
    std::size_t begin = 0, end = 0;
};

class AddedVocabulary {
public:
    AddedVocabulary() = default;
    // Later entries with the same content replace earlier ones.
    explicit AddedVocabulary(std::vector<AddedToken> tokens);

    // Cuts `text` into segments, matching the tokens with `normalized == want_normalized`.
    // With `split_special == true`, special tokens are left in the text (HF's
    // `encode_special_tokens`).
    void split(std::string_view text, bool want_normalized, bool split_special,
               std::vector<TextSegment>& out) const;

    const AddedToken* by_id(int32_t id) const;
    const AddedToken* by_content(std::string_view content) const;
    const std::vector<AddedToken>& tokens() const { return tokens_; }
    bool empty() const { return tokens_.empty(); }

private:
    // A byte trie: node 0 is the root; `edges_` maps (node << 8 | byte) → child.
    struct Trie {
        std::unordered_map<uint64_t, int32_t> edges;
        std::vector<int32_t> terminal{-1};  // token index ending at each node
        std::array<bool, 256> first_byte{};
        bool empty = true;
        void insert(std::string_view s, int32_t token_index);
        // Longest token starting at `pos`: (token index, length) or (-1, 0).
        std::pair<int32_t, std::size_t> longest_at(std::string_view text, std::size_t pos) const;
    };

    std::vector<AddedToken> tokens_;
    std::unordered_map<int32_t, std::size_t> index_by_id_;
    std::unordered_map<std::string, std::size_t> index_by_content_;
    Trie raw_trie_, normalized_trie_;
};

}  // namespace brigade::model::text
