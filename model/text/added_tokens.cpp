#include "model/text/added_tokens.hpp"

#include "model/text/unicode.hpp"

namespace brigade::model::text {
namespace {

// `\w$` and `^\w` of the regex crate, on the code point before / after a match.
bool ends_with_word(std::string_view s) {
    if (s.empty()) return false;
    std::size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t i = start;
    return is_word_char(next_code_point(s, i));
}

bool starts_with_word(std::string_view s) {
    if (s.empty()) return false;
    std::size_t i = 0;
    return is_word_char(next_code_point(s, i));
}

// Start of the whitespace run that ends `s` (`\s*$`).
std::size_t trailing_space_start(std::string_view s) {
    std::size_t e = s.size();
    while (e > 0) {
        std::size_t start = e - 1;
        while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        std::size_t i = start;
        if (!is_whitespace(next_code_point(s, i))) break;
        e = start;
    }
    return e;
}

// Length of the whitespace run that starts `s` (`^\s*`).
std::size_t leading_space_length(std::string_view s) {
    std::size_t b = 0;
    while (b < s.size()) {
        std::size_t i = b;
        if (!is_whitespace(next_code_point(s, i))) break;
        b = i;
    }
    return b;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view s, int32_t token_index) {
    if (s.empty()) return;
    int32_t node = 0;
    for (char c : s) {
        uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
        auto it = edges.find(key);
        if (it == edges.end()) {
            auto child = static_cast<int32_t>(terminal.size());
            terminal.push_back(-1);
            edges.emplace(key, child);
            node = child;
        } else {
            node = it->second;
        }
    }
    terminal[static_cast<std::size_t>(node)] = token_index;
    first_byte[static_cast<unsigned char>(s[0])] = true;
    empty = false;
}

std::pair<int32_t, std::size_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                                  std::size_t pos) const {
    std::pair<int32_t, std::size_t> best{-1, 0};
    int32_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
        uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]);
        auto it = edges.find(key);
        if (it == edges.end()) break;
        node = it->second;
        if (terminal[static_cast<std::size_t>(node)] >= 0) {
            best = {terminal[static_cast<std::size_t>(node)], i + 1 - pos};
        }
    }
    return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) {
    for (auto& t : tokens) {
        auto it = index_by_content_.find(t.content);
        if (it != index_by_content_.end()) {
            index_by_id_.erase(tokens_[it->second].id);
            tokens_[it->second] = std::move(t);
            index_by_id_[tokens_[it->second].id] = it->second;
            continue;
        }
        index_by_content_.emplace(t.content, tokens_.size());
        index_by_id_[t.id] = tokens_.size();
        tokens_.push_back(std::move(t));
    }
    for (std::size_t k = 0; k < tokens_.size(); ++k) {
        Trie& trie = tokens_[k].normalized ? normalized_trie_ : raw_trie_;
        trie.insert(tokens_[k].content, static_cast<int32_t>(k));
    }
}

void AddedVocabulary::split(std::string_view text, bool want_normalized, bool split_special,
                            std::vector<TextSegment>& out) const {
    const Trie& trie = want_normalized ? normalized_trie_ : raw_trie_;
    std::size_t start_offset = 0;
    if (!trie.empty) {
        std::size_t pos = 0;
        while (pos < text.size()) {
            if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
                ++pos;
                continue;
            }
            auto [index, len] = trie.longest_at(text, pos);
            if (index < 0) {
                ++pos;
                continue;
            }
            const AddedToken& tok = tokens_[static_cast<std::size_t>(index)];
            std::size_t start = pos, stop = pos + len;
            pos = stop;  // the automaton resumes after a match even when it is discarded
            if (split_special && tok.special) continue;
            if (tok.single_word) {
                bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
                bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop));
                if (!start_space || !stop_space) continue;
            }
            if (tok.lstrip) {
                // Never reach back into what the previous match already took.
                start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
            }
            if (tok.rstrip) stop += leading_space_length(text.substr(stop));
            if (start < start_offset) continue;  // overlaps a previous rstrip
            if (start_offset < start) out.push_back({-1, start_offset, start});
            out.push_back({tok.id, start, stop});
            start_offset = stop;
            pos = std::max(pos, stop);
        }
    }
    if (start_offset < text.size() || text.empty()) out.push_back({-1, start_offset, text.size()});
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
    auto it = index_by_id_.find(id);
    return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::by_content(std::string_view content) const {
    auto it = index_by_content_.find(std::string(content));
    return it == index_by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace brigade::model::text
