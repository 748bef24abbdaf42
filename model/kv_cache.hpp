#pragma once
// Keys and values of every sequence a stage serves, for the stage's local layers only
// (house guide §2). Storage is backend memory, one buffer per sequence laid out as
// [local_layer][K|V][block positions][kv_dim], so attention reads one contiguous block per
// layer. Elements are F16 (the default: half the memory and half the bytes a long context's
// decode step reads, at a rounding of 2^-11 relative per element) or F32 (then the forward pass
// writes new rows in place with its projection matmul).
//
// F16 keys are kept in tiles of kKeyTile positions (KeyLayout::kTiles), so decode attention
// scores kKeyTile keys per vector with FMAs alone; values, and F32 keys (which the projection
// writes as rows), are rows. A block holds its capacity rounded up to whole tiles.
//
// A sequence grows by doubling (copying through the backend's read/write). Limits: a per
// sequence context limit (positions) and an optional total byte budget over all sequences.

#include <cstdint>
#include <map>
#include <vector>

#include "model/backend.hpp"
#include "model/errors.hpp"

namespace brigade::model {

struct KvCacheLimits {
    std::int64_t max_positions = 4096;  // per sequence
    std::uint64_t max_bytes = 0;        // bytes of claimed positions, all sequences; 0 = none
};

class KvCache {
public:
    // `dtype`: F32 or F16 (anything else is taken as F32).
    KvCache(Backend& backend, int n_local_layers, int kv_dim, KvCacheLimits limits,
            DType dtype = DType::kF16);

    DType dtype() const { return dtype_; }
    // How keys() blocks are laid out (values are always rows).
    KeyLayout key_layout() const {
        return dtype_ == DType::kF16 ? KeyLayout::kTiles : KeyLayout::kRows;
    }

    // Cached positions of a sequence (0 for an unknown sequence).
    std::int64_t length(std::uint64_t seq_id) const;
    bool contains(std::uint64_t seq_id) const { return seqs_.count(seq_id) != 0; }
    std::size_t n_sequences() const { return seqs_.size(); }

    // Makes room for `n_positions` positions of `seq_id` (creating the sequence if needed) and
    // claims them. The byte budget bounds the positions claimed over all sequences (the valid
    // ones, plus what a step about to run asked for); capacity grows by doubling, but never
    // into room that other sequences' claims leave short. Errors when past the context limit or
    // the budget; nothing changes then.
    Result<void> reserve(std::uint64_t seq_id, std::int64_t n_positions);
    // Whether `n_positions` positions of one sequence fit the byte budget with no other
    // sequence held: when not, no amount of waiting lets that sequence run.
    bool fits_budget_alone(std::int64_t n_positions) const;
    // Marks positions [0, n) as valid after the forward pass wrote them. n <= capacity.
    void set_length(std::uint64_t seq_id, std::int64_t n);

    // Base of the K or V block of a local layer: its positions' kv_dim elements of dtype(), in
    // rows ([capacity, kv_dim]) or, for keys, as key_layout() says. The sequence must exist.
    void* keys(std::uint64_t seq_id, int local_layer);
    void* values(std::uint64_t seq_id, int local_layer);

    // Stores n rows of kv_dim floats from backend memory `src` (at byte offset `src_offset`)
    // into positions pos0 .. pos0 + n - 1 of the K (which = 0) or V (which = 1) block of a
    // local layer, as dtype() (Backend::store_as, or store_key_tiles for tiled keys). pos0 + n
    // must be within the reserved capacity.
    void write_rows(std::uint64_t seq_id, int local_layer, int which, std::int64_t pos0,
                    std::int64_t n, const DeviceBuffer& src, std::size_t src_offset);

    // Forgets positions n.. of a sequence (n <= length).
    Result<void> truncate(std::uint64_t seq_id, std::int64_t n);
    // Makes `dst` hold a copy of the first `n` positions of `src` (prefix reuse: both sequences
    // continue independently). Any previous content of `dst` is replaced.
    Result<void> copy_prefix(std::uint64_t src, std::uint64_t dst, std::int64_t n);
    // Gives sequence `src` the id `dst` (no copy), keeping its first `n` positions; any previous
    // `dst` is dropped. Errors (nothing changes) when `src` is unknown or holds fewer than n.
    Result<void> rename(std::uint64_t src, std::uint64_t dst, std::int64_t n);
    // Drops a sequence and frees its memory.
    void release(std::uint64_t seq_id);

    // Positions claimed over all sequences, and what the byte budget holds (-1: no budget).
    std::int64_t positions_claimed() const { return claimed_total_; }
    std::int64_t budget_positions() const;
    // K and V bytes of one position over the local layers.
    std::uint64_t bytes_per_position() const;
    // Bytes holding valid positions, and bytes allocated (capacities in whole key tiles), over
    // all sequences.
    std::uint64_t bytes_used() const;
    std::uint64_t bytes_reserved() const;
    const KvCacheLimits& limits() const { return limits_; }
    // Sets the byte budget (0 = none) for reservations from now on; what is reserved stays.
    void set_max_bytes(std::uint64_t max_bytes) { limits_.max_bytes = max_bytes; }

private:
    struct Sequence {
        DeviceBuffer buffer;
        std::int64_t capacity = 0;
        std::int64_t length = 0;
        std::int64_t claimed = 0;  // positions counted against the budget (>= length)
    };
    // Positions a block of a sequence of `capacity` positions holds: whole tiles for tiled keys.
    std::int64_t block_positions(std::int64_t capacity) const;
    // Byte offset of the K or V block of a local layer in a sequence of `capacity` positions.
    std::size_t block_offset(std::int64_t capacity, int local_layer, int which) const;
    std::size_t row_bytes() const { return static_cast<std::size_t>(kv_dim_) * element_bytes_; }
    // Sets s.claimed, keeping claimed_total_ (kept, not summed: reserve runs every step).
    void set_claimed(Sequence& s, std::int64_t n);
    // Copies the first n positions of every layer of `from` into `to` (capacities may differ).
    void copy_positions(const Sequence& from, Sequence& to, std::int64_t n);

    Backend& backend_;
    int n_layers_;
    int kv_dim_;
    DType dtype_;
    std::size_t element_bytes_;
    KvCacheLimits limits_;
    std::map<std::uint64_t, Sequence> seqs_;
    std::int64_t claimed_total_ = 0;  // Σ claimed over seqs_
};

}  // namespace brigade::model
