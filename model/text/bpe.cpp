#include "model/text/bpe.hpp"

#include <nlohmann/json.hpp>
#include <queue>

#include "model/text/tokenizer_json_util.hpp"
#include "model/text/unicode.hpp"

namespace brigade::model::text {
namespace {

struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the piece it covers; 0 once merged into its left neighbour
};

struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
};

// Lowest rank first, then leftmost (HF's `Merge::cmp`).
struct CandidateAfter {
    bool operator()(const Candidate& a, const Candidate& b) const {
        if (a.rank != b.rank) return a.rank > b.rank;
        return a.pos > b.pos;
    }
};

const char kHex[] = "0123456789ABCDEF";

}  // namespace

Result<BpeModel> BpeModel::create(StringIdMap vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  Options options) {
    BpeModel m;
    int32_t max_id = -1;
    for (const auto& [token, id] : vocab) {
        if (id < 0)
            return make_error(errc::bad_tokenizer, "negative id in vocab for '" + token + "'");
        max_id = std::max(max_id, id);
    }
    if (max_id >= (1 << 24)) {
        return make_error(errc::bad_tokenizer, "vocab ids above 16M are not supported");
    }
    m.id_to_token_.assign(static_cast<std::size_t>(max_id + 1), std::string());
    m.id_present_.assign(static_cast<std::size_t>(max_id + 1), false);
    for (const auto& [token, id] : vocab) {
        m.id_to_token_[static_cast<std::size_t>(id)] = token;
        m.id_present_[static_cast<std::size_t>(id)] = true;
    }
    m.vocab_ = std::move(vocab);
    m.options_ = std::move(options);
    const std::size_t prefix_len = m.options_.continuing_subword_prefix.size();
    std::size_t slots = 16;
    while (slots < merges.size() * 2) slots *= 2;
    m.merge_slots_.assign(slots, MergeSlot{});
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [a, b] = merges[rank];
        auto ia = m.vocab_.find(a);
        auto ib = m.vocab_.find(b);
        if (ia == m.vocab_.end() || ib == m.vocab_.end()) {
            return make_error(errc::bad_tokenizer, "merge " + std::to_string(rank) + " ('" + a +
                                                       "', '" + b + "') uses a token not in vocab");
        }
        std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
        auto im = m.vocab_.find(merged);
        if (im == m.vocab_.end()) {
            return make_error(errc::bad_tokenizer, "merge " + std::to_string(rank) + " makes '" +
                                                       merged + "', not in vocab");
        }
        m.insert_merge(pair_key(ia->second, ib->second),
                       MergeResult{static_cast<uint32_t>(rank), im->second});
    }
    m.small_char_ids_.assign(0x200, -1);
    for (char32_t cp = 0; cp < 0x200; ++cp) {
        std::string s;
        append_utf8(s, cp);
        if (auto it = m.vocab_.find(s); it != m.vocab_.end()) m.small_char_ids_[cp] = it->second;
    }
    m.byte_fallback_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
        char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
        if (auto it = m.vocab_.find(std::string_view(name, 6)); it != m.vocab_.end()) {
            m.byte_fallback_ids_[static_cast<std::size_t>(b)] = it->second;
        }
    }
    if (m.options_.unk_token) {
        if (auto it = m.vocab_.find(*m.options_.unk_token); it != m.vocab_.end()) {
            m.unk_id_ = it->second;
        }
    }
    return m;
}

Result<StringIdMap> BpeModel::parse_vocab(const nlohmann::json& v) {
    if (!v.is_object()) return make_error(errc::bad_tokenizer, "a BPE vocab must be a JSON object");
    StringIdMap vocab;
    vocab.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it->is_number_integer()) {
            return make_error(errc::bad_tokenizer,
                              "vocab id of '" + it.key() + "' is not an integer");
        }
        auto id = it->get<int64_t>();
        if (id < 0 || id > INT32_MAX) {
            return make_error(errc::bad_tokenizer, "vocab id of '" + it.key() + "' out of range");
        }
        vocab.emplace(it.key(), static_cast<int32_t>(id));
    }
    return vocab;
}

Result<BpeModel> BpeModel::from_json(const nlohmann::json& model) {
    if (!model.is_object()) return make_error(errc::bad_tokenizer, "'model' must be an object");
    if (auto t = json_optional_string(model, "type"); t && *t != "BPE") {
        return make_error(errc::bad_tokenizer,
                          "model type '" + *t + "' is not supported (only BPE)");
    }
    auto v = model.find("vocab");
    if (v == model.end())
        return make_error(errc::bad_tokenizer, "BPE model needs a 'vocab' object");
    auto vocab = parse_vocab(*v);
    if (!vocab) return vocab.error();
    std::vector<std::pair<std::string, std::string>> merges;
    if (auto mj = model.find("merges"); mj != model.end() && !mj->is_null()) {
        if (!mj->is_array()) return make_error(errc::bad_tokenizer, "'merges' must be an array");
        merges.reserve(mj->size());
        for (const auto& e : *mj) {
            if (e.is_string()) {
                // Legacy "a b": exactly one space separates the two halves.
                const auto& s = e.get_ref<const std::string&>();
                auto sp = s.find(' ');
                if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
                    return make_error(errc::bad_tokenizer, "merge '" + s + "' is not 'a b'");
                }
                merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
            } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
                merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
            } else {
                return make_error(errc::bad_tokenizer, "a merge must be \"a b\" or [\"a\", \"b\"]");
            }
        }
    }
    Options o;
    o.unk_token = json_optional_string(model, "unk_token");
    o.continuing_subword_prefix =
        json_optional_string(model, "continuing_subword_prefix").value_or("");
    o.end_of_word_suffix = json_optional_string(model, "end_of_word_suffix").value_or("");
    o.fuse_unk = json_bool(model, "fuse_unk", false);
    o.byte_fallback = json_bool(model, "byte_fallback", false);
    o.ignore_merges = json_bool(model, "ignore_merges", false);
    if (auto d = model.find("dropout");
        d != model.end() && d->is_number() && d->get<double>() > 0) {
        return make_error(errc::bad_tokenizer, "BPE dropout is not supported for inference");
    }
    return create(std::move(*vocab), merges, std::move(o));
}

namespace {

std::size_t mix(uint64_t x) {
    // splitmix64 finalizer: ids are small and dense, so the raw key would cluster.
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return static_cast<std::size_t>(x);
}

}  // namespace

void BpeModel::insert_merge(uint64_t key, MergeResult value) {
    const std::size_t mask = merge_slots_.size() - 1;
    for (std::size_t i = mix(key) & mask;; i = (i + 1) & mask) {
        MergeSlot& slot = merge_slots_[i];
        if (slot.key == kEmptyKey) {
            slot.key = key;
            slot.value = value;
            ++n_merges_;
            return;
        }
        if (slot.key == key) {
            slot.value = value;  // a later duplicate overrides, as in HF's HashMap collect
            return;
        }
    }
}

const BpeModel::MergeResult* BpeModel::find_merge(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    const std::size_t mask = merge_slots_.size() - 1;
    for (std::size_t i = mix(key) & mask;; i = (i + 1) & mask) {
        const MergeSlot& slot = merge_slots_[i];
        if (slot.key == key) return &slot.value;
        if (slot.key == kEmptyKey) return nullptr;
    }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (options_.ignore_merges) {
        if (auto it = vocab_.find(piece); it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    // 1. Characters → initial symbols (`merge_word`).
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    auto add = [&](int32_t id, uint32_t len) {
        auto n = static_cast<int32_t>(symbols.size());
        symbols.push_back(Symbol{id, n - 1, n + 1, len});
    };
    // A pending (possibly fused) unknown: its id and bytes, pending while unk_len > 0. (Two
    // plain variables: GCC 12 warns falsely on an optional<pair> here.)
    int32_t unk_id = 0;
    uint32_t unk_len = 0;
    const bool affixes =
        !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
    std::string scratch;
    std::size_t i = 0;
    while (i < piece.size()) {
        std::size_t b = i;
        i += utf8_sequence_length(static_cast<unsigned char>(piece[i]));
        if (i > piece.size()) i = piece.size();
        auto byte_len = static_cast<uint32_t>(i - b);
        std::string_view s = piece.substr(b, i - b);
        if (affixes) {
            scratch.clear();
            if (b != 0) scratch += options_.continuing_subword_prefix;
            scratch += s;
            if (i == piece.size()) scratch += options_.end_of_word_suffix;
            s = scratch;
        }
        int32_t id = -1;
        if (!affixes && byte_len <= 2) {
            std::size_t k = b;
            char32_t cp = next_code_point(piece, k);
            if (cp < small_char_ids_.size()) id = small_char_ids_[cp];
        }
        if (id < 0) {
            if (auto it = vocab_.find(s); it != vocab_.end()) id = it->second;
        }
        if (id >= 0) {
            if (unk_len > 0) {
                add(unk_id, unk_len);
                unk_len = 0;
            }
            add(id, byte_len);
            continue;
        }
        if (options_.byte_fallback) {
            bool all = true;
            for (char c : s) all = all && byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
            if (all) {
                for (char c : s) add(byte_fallback_ids_[static_cast<unsigned char>(c)], 1);
                continue;
            }
        }
        if (unk_id_) {
            if (unk_len > 0 && options_.fuse_unk) {
                unk_len += byte_len;
            } else {
                if (unk_len > 0) add(unk_id, unk_len);
                unk_id = *unk_id_;
                unk_len = byte_len;
            }
        }
    }
    if (unk_len > 0) add(unk_id, unk_len);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    // 2. Merge by rank with a heap of candidate pairs (`Word::merge_all`).
    if (symbols.size() > 1 && n_merges_ != 0) {
        std::vector<Candidate> storage;
        storage.reserve(symbols.size() * 2);
        std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue(
            CandidateAfter{}, std::move(storage));
        for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
            if (const auto* m = find_merge(symbols[k].id, symbols[k + 1].id)) {
                queue.push(Candidate{m->rank, static_cast<uint32_t>(k), m->new_id});
            }
        }
        while (!queue.empty()) {
            Candidate top = queue.top();
            queue.pop();
            Symbol& left = symbols[top.pos];
            if (left.len == 0 || left.next == -1) continue;
            Symbol right = symbols[static_cast<std::size_t>(left.next)];
            const auto* m = find_merge(left.id, right.id);
            if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
            int32_t right_pos = left.next;
            left.id = top.new_id;
            left.len += right.len;
            left.next = right.next;
            symbols[static_cast<std::size_t>(right_pos)].len = 0;
            if (right.next >= 0)
                symbols[static_cast<std::size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
            if (left.prev >= 0) {
                const Symbol& p = symbols[static_cast<std::size_t>(left.prev)];
                if (const auto* pm = find_merge(p.id, left.id)) {
                    queue.push(Candidate{pm->rank, static_cast<uint32_t>(left.prev), pm->new_id});
                }
            }
            if (left.next >= 0) {
                const Symbol& n = symbols[static_cast<std::size_t>(left.next)];
                if (const auto* nm = find_merge(left.id, n.id)) {
                    queue.push(Candidate{nm->rank, top.pos, nm->new_id});
                }
            }
        }
    }
    for (const auto& s : symbols) {
        if (s.len != 0) out.push_back(s.id);
    }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() ||
        !id_present_[static_cast<std::size_t>(id)]) {
        return nullptr;
    }
    return &id_to_token_[static_cast<std::size_t>(id)];
}

}  // namespace brigade::model::text
