#include "node/prefix_cache.hpp"

#include <algorithm>

namespace brigade::node {

std::optional<PrefixCache::Match> PrefixCache::find(std::span<const std::int32_t> prompt,
                                                    std::int64_t max_tokens) {
    auto best = entries_.end();
    std::int64_t best_n = 0;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const auto limit = std::min<std::size_t>(it->tokens.size(), prompt.size());
        const auto mismatch =
            std::mismatch(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(limit),
                          it->tokens.begin());
        const auto n = static_cast<std::int64_t>(mismatch.first - prompt.begin());
        if (n > best_n) {
            best_n = n;
            best = it;
        }
    }
    best_n = std::min(best_n, max_tokens);
    if (best == entries_.end() || best_n <= 0) return std::nullopt;
    entries_.splice(entries_.begin(), entries_, best);  // most recently used
    return Match{best->seq_id, best_n};
}

void PrefixCache::insert(std::uint64_t seq_id, std::vector<std::int32_t> tokens) {
    Entry e;
    e.seq_id = seq_id;
    e.bytes = kv_.bytes_per_position() * tokens.size();
    e.tokens = std::move(tokens);
    if (e.bytes > max_bytes_ || e.tokens.empty()) {
        release(seq_id);
        return;
    }
    // A newer entry that extends an older one makes the older one useless.
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->tokens.size() <= e.tokens.size() &&
            std::equal(it->tokens.begin(), it->tokens.end(), e.tokens.begin())) {
            release(it->seq_id);
            bytes_ -= it->bytes;
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    evict_to(max_bytes_ - e.bytes);
    bytes_ += e.bytes;
    entries_.push_front(std::move(e));
}

void PrefixCache::evict_to(std::uint64_t budget) {
    while (!entries_.empty() && bytes_ > budget) {
        release(entries_.back().seq_id);
        bytes_ -= entries_.back().bytes;
        entries_.pop_back();
    }
}

void PrefixCache::erase(std::uint64_t seq_id) {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.seq_id == seq_id; });
    if (it == entries_.end()) return;
    release(it->seq_id);
    bytes_ -= it->bytes;
    entries_.erase(it);
}

bool PrefixCache::evict_oldest() {
    if (entries_.empty()) return false;
    evict_to(bytes_ - entries_.back().bytes);
    return true;
}

void PrefixCache::clear() { evict_to(0); }

void PrefixCache::release(std::uint64_t seq_id) {
    kv_.release(seq_id);
    if (on_release_) on_release_(seq_id);
}

}  // namespace brigade::node
