#pragma once
// The `BPE` model of tokenizer.json: vocab + ranked merges, applied to one pre-token at a time.
// Follows huggingface/tokenizers:tokenizers/src/models/bpe/{model.rs,word.rs}: a pre-token is
// split into characters (unknown ones become `<0xXX>` byte tokens or the unk token), then the
// lowest-ranked adjacent pair is merged until none is left; ties go to the leftmost pair.

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/errors.hpp"

namespace brigade::model::text {

// Hash for heterogeneous lookup, so that a `std::string_view` finds a `std::string` key.
struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
public:
    struct Options {
        std::optional<std::string> unk_token;
        std::string continuing_subword_prefix;
        std::string end_of_word_suffix;
        bool fuse_unk = false;
        bool byte_fallback = false;
        bool ignore_merges = false;
    };

    // `merges` are (left, right) token pairs in rank order.
    static Result<BpeModel> create(StringIdMap vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   Options options);
    // A `{"token": id, ...}` object (tokenizer.json's `vocab`, or vocab.json).
    static Result<StringIdMap> parse_vocab(const nlohmann::json& vocab);
    // The `model` object of tokenizer.json (must have `"type": "BPE"` or no type).
    static Result<BpeModel> from_json(const nlohmann::json& model);

    // Appends the ids of one pre-token (non-empty, valid UTF-8) to `out`.
    void encode(std::string_view piece, std::vector<int32_t>& out) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The vocab string of `id`, or nullptr when the model has no such id.
    const std::string* id_to_token(int32_t id) const;
    // One more than the largest id in the vocab.
    int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

private:
    struct MergeResult {
        uint32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    const MergeResult* find_merge(int32_t a, int32_t b) const;
    void insert_merge(uint64_t key, MergeResult value);

    // Open-addressing table of merges (linear probing, load ≤ 0.5): one cache miss per lookup
    // instead of the two or three of a node-based map, which dominated encode time.
    struct MergeSlot {
        uint64_t key = kEmptyKey;
        MergeResult value{};
    };
    static constexpr uint64_t kEmptyKey = ~uint64_t{0};

    StringIdMap vocab_;
    std::vector<std::string> id_to_token_;  // "" where the vocab has a hole
    std::vector<bool> id_present_;
    std::vector<MergeSlot> merge_slots_;  // size is a power of two
    std::size_t n_merges_ = 0;
    // Id of each single code point below U+0200 as a whole token (-1: not in vocab). Covers
    // the whole byte-level alphabet, so byte-level words skip the vocab hash.
    std::vector<int32_t> small_char_ids_;
    std::vector<int32_t> byte_fallback_ids_;  // 256 entries, -1 where `<0xXX>` is absent
    Options options_;
    std::optional<int32_t> unk_id_;
};

}  // namespace brigade::model::text
