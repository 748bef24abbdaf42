#pragma once
// KV of recently finished sequences, kept so that a new request whose prompt starts with the
// same tokens (agent loops resend a long system prompt and history) computes only the rest.
//
// The entries are sequences living in the stage's `KvCache` under ids this cache owns. Bounded
// by bytes (valid positions × bytes per position; a sequence's reservation can be up to twice
// that because the cache grows by doubling), evicted least recently used first. Used only from
// the compute thread.

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "model/kv_cache.hpp"

namespace brigade::node {

class PrefixCache {
public:
    // `on_release(seq_id)`, if set, runs whenever the cache frees one of its sequences
    // (evicted, replaced by a longer one, cleared, or refused at insert): with several stages
    // the head tells the others to free their share.
    PrefixCache(model::KvCache& kv, std::uint64_t max_bytes,
                std::function<void(std::uint64_t)> on_release = {})
        : kv_(kv), max_bytes_(max_bytes), on_release_(std::move(on_release)) {}
    ~PrefixCache() { clear(); }
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    struct Match {
        std::uint64_t seq_id = 0;   // the cached sequence to copy from
        std::int64_t n_tokens = 0;  // length of the common prefix
    };
    // The entry sharing the longest prefix with `prompt`, at most `max_tokens` long; marks it
    // used. nullopt when nothing shares even one token.
    std::optional<Match> find(std::span<const std::int32_t> prompt, std::int64_t max_tokens);

    // Takes over KV sequence `seq_id` whose first `tokens.size()` positions hold `tokens`.
    // Evicts old entries to stay within the budget (possibly this one at once).
    void insert(std::uint64_t seq_id, std::vector<std::int32_t> tokens);

    // Frees entry `seq_id` (nothing when there is none).
    void erase(std::uint64_t seq_id);
    // Frees the least recently used entry (running requests need its KV room); false when
    // there is none.
    bool evict_oldest();
    void clear();
    std::size_t n_entries() const { return entries_.size(); }
    std::uint64_t bytes() const { return bytes_; }

private:
    struct Entry {
        std::uint64_t seq_id = 0;
        std::vector<std::int32_t> tokens;
        std::uint64_t bytes = 0;
    };
    void evict_to(std::uint64_t budget);
    void release(std::uint64_t seq_id);

    model::KvCache& kv_;
    std::uint64_t max_bytes_;
    std::function<void(std::uint64_t)> on_release_;
    std::uint64_t bytes_ = 0;
    std::list<Entry> entries_;  // most recently used first
};

}  // namespace brigade::node
