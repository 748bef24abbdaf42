#include "model/kv_cache.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace brigade::model {
namespace {

// New sequences start with room for this many positions, then double.
constexpr std::int64_t kInitialPositions = 256;

}  // namespace

KvCache::KvCache(Backend& backend, int n_local_layers, int kv_dim, KvCacheLimits limits,
                 DType dtype)
    : backend_(backend),
      n_layers_(n_local_layers),
      kv_dim_(kv_dim),
      dtype_(dtype == DType::kF16 ? DType::kF16 : DType::kF32),
      element_bytes_(kv_element_bytes(dtype_)),
      limits_(limits) {}

std::int64_t KvCache::length(std::uint64_t seq_id) const {
    auto it = seqs_.find(seq_id);
    return it == seqs_.end() ? 0 : it->second.length;
}

std::uint64_t KvCache::bytes_per_position() const {
    return 2ull * static_cast<std::uint64_t>(n_layers_) * row_bytes();
}

std::uint64_t KvCache::bytes_used() const {
    std::uint64_t n = 0;
    for (const auto& [id, s] : seqs_) n += static_cast<std::uint64_t>(s.length);
    return n * bytes_per_position();
}

std::uint64_t KvCache::bytes_reserved() const {
    std::uint64_t n = 0;
    for (const auto& [id, s] : seqs_) n += static_cast<std::uint64_t>(block_positions(s.capacity));
    return n * bytes_per_position();
}

std::int64_t KvCache::block_positions(std::int64_t capacity) const {
    if (key_layout() == KeyLayout::kRows) return capacity;
    return (capacity + kKeyTile - 1) / kKeyTile * kKeyTile;
}

std::size_t KvCache::block_offset(std::int64_t capacity, int local_layer, int which) const {
    return static_cast<std::size_t>(2 * local_layer + which) *
           static_cast<std::size_t>(block_positions(capacity)) * row_bytes();
}

void* KvCache::keys(std::uint64_t seq_id, int local_layer) {
    const Sequence& s = seqs_.at(seq_id);
    return static_cast<std::uint8_t*>(s.buffer.data()) + block_offset(s.capacity, local_layer, 0);
}

void* KvCache::values(std::uint64_t seq_id, int local_layer) {
    const Sequence& s = seqs_.at(seq_id);
    return static_cast<std::uint8_t*>(s.buffer.data()) + block_offset(s.capacity, local_layer, 1);
}

void KvCache::copy_positions(const Sequence& from, Sequence& to, std::int64_t n) {
    if (n <= 0 || n_layers_ == 0) return;
    // Through host memory: a plain copy on CPU backends, and correct (if slow) on any other.
    // Whole tiles for tiled keys: a block's first tiles are one contiguous run (the lanes past
    // n are copied too, and never read).
    const std::size_t bytes = static_cast<std::size_t>(block_positions(n)) * row_bytes();
    std::vector<std::uint8_t> staging(bytes);
    for (int l = 0; l < n_layers_; ++l) {
        for (int which = 0; which < 2; ++which) {
            backend_.read(from.buffer, block_offset(from.capacity, l, which), staging.data(),
                          bytes);
            backend_.write(to.buffer, block_offset(to.capacity, l, which), staging.data(), bytes);
        }
    }
}

void KvCache::write_rows(std::uint64_t seq_id, int local_layer, int which, std::int64_t pos0,
                         std::int64_t n, const DeviceBuffer& src, std::size_t src_offset) {
    Sequence& s = seqs_.at(seq_id);
    const std::size_t block = block_offset(s.capacity, local_layer, which);
    const float* from = src.f32() + src_offset / sizeof(float);
    if (which == 0 && key_layout() == KeyLayout::kTiles) {
        backend_.store_key_tiles(from, n, kv_dim_, pos0, dtype_, s.buffer, block);
        return;
    }
    backend_.store_as(from, n * kv_dim_, dtype_, s.buffer,
                      block + static_cast<std::size_t>(pos0) * row_bytes());
}

Result<void> KvCache::reserve(std::uint64_t seq_id, std::int64_t n_positions) {
    if (n_positions > limits_.max_positions) {
        return make_error(errc::out_of_range, "sequence " + std::to_string(seq_id) + " needs " +
                                                  std::to_string(n_positions) +
                                                  " positions but the context limit is " +
                                                  std::to_string(limits_.max_positions));
    }
    auto it = seqs_.find(seq_id);
    const std::int64_t capacity = it == seqs_.end() ? 0 : it->second.capacity;
    const std::int64_t claimed = it == seqs_.end() ? 0 : it->second.claimed;
    const std::int64_t others = claimed_total_ - claimed;
    const std::int64_t budget = budget_positions();
    if (budget >= 0 && others + n_positions > budget) {
        return make_error(errc::out_of_range,
                          "KV cache budget of " + std::to_string(limits_.max_bytes) + " bytes (" +
                              std::to_string(budget) + " positions) exceeded: sequence " +
                              std::to_string(seq_id) + " needs " + std::to_string(n_positions) +
                              " positions, other sequences hold " + std::to_string(others));
    }
    if (n_positions <= capacity && it != seqs_.end()) {
        set_claimed(it->second, std::max(claimed, n_positions));
        return {};
    }
    std::int64_t new_capacity = std::max<std::int64_t>(capacity, kInitialPositions);
    while (new_capacity < n_positions) new_capacity *= 2;
    new_capacity = std::min(new_capacity, limits_.max_positions);
    // Near the budget, grow only into the room the other sequences leave: a doubling past it
    // would hold memory the budget does not have.
    if (budget >= 0) new_capacity = std::max(n_positions, std::min(new_capacity, budget - others));
    Sequence grown;
    grown.capacity = new_capacity;
    grown.claimed = claimed;  // set_claimed below counts the growth
    const std::size_t bytes =
        static_cast<std::size_t>(block_positions(new_capacity)) * bytes_per_position();
    grown.buffer = backend_.alloc(std::max<std::size_t>(bytes, sizeof(float)));
    if (it != seqs_.end()) {
        grown.length = it->second.length;
        copy_positions(it->second, grown, grown.length);
        it->second = std::move(grown);
    } else {
        it = seqs_.emplace(seq_id, std::move(grown)).first;
    }
    set_claimed(it->second, std::max(claimed, n_positions));
    return {};
}

void KvCache::set_claimed(Sequence& s, std::int64_t n) {
    claimed_total_ += n - s.claimed;
    s.claimed = n;
}

std::int64_t KvCache::budget_positions() const {
    if (limits_.max_bytes == 0 || bytes_per_position() == 0) return -1;
    return static_cast<std::int64_t>(limits_.max_bytes / bytes_per_position());
}

bool KvCache::fits_budget_alone(std::int64_t n_positions) const {
    const std::int64_t budget = budget_positions();
    return budget < 0 || n_positions <= budget;
}

void KvCache::set_length(std::uint64_t seq_id, std::int64_t n) {
    Sequence& s = seqs_.at(seq_id);
    s.length = std::min(n, s.capacity);
    set_claimed(s, std::max(s.claimed, s.length));
}

Result<void> KvCache::truncate(std::uint64_t seq_id, std::int64_t n) {
    auto it = seqs_.find(seq_id);
    const std::int64_t len = it == seqs_.end() ? 0 : it->second.length;
    if (n < 0 || n > len) {
        return make_error(errc::out_of_range, "cannot truncate sequence " + std::to_string(seq_id) +
                                                  " to " + std::to_string(n) +
                                                  " positions: it has " + std::to_string(len));
    }
    if (it != seqs_.end()) {
        it->second.length = n;
        set_claimed(it->second, n);
    }
    return {};
}

Result<void> KvCache::copy_prefix(std::uint64_t src, std::uint64_t dst, std::int64_t n) {
    const std::int64_t src_len = length(src);
    if (n < 0 || n > src_len) {
        return make_error(errc::out_of_range, "cannot reuse " + std::to_string(n) +
                                                  " positions of sequence " + std::to_string(src) +
                                                  ": it has " + std::to_string(src_len));
    }
    if (src == dst) return truncate(dst, n);
    release(dst);
    if (auto r = reserve(dst, std::max<std::int64_t>(n, 1)); !r) return r;
    Sequence& to = seqs_.at(dst);
    copy_positions(seqs_.at(src), to, n);
    to.length = n;
    set_claimed(to, n);
    return {};
}

Result<void> KvCache::rename(std::uint64_t src, std::uint64_t dst, std::int64_t n) {
    auto it = seqs_.find(src);
    if (it == seqs_.end() || n < 0 || n > it->second.length) {
        return make_error(errc::out_of_range, "cannot keep " + std::to_string(n) +
                                                  " positions of sequence " + std::to_string(src) +
                                                  ": it has " + std::to_string(length(src)));
    }
    if (src == dst) return truncate(dst, n);
    release(dst);
    auto node = seqs_.extract(it);
    node.key() = dst;
    node.mapped().length = n;
    set_claimed(node.mapped(), n);
    seqs_.insert(std::move(node));
    return {};
}

void KvCache::release(std::uint64_t seq_id) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    claimed_total_ -= it->second.claimed;
    seqs_.erase(it);
}

}  // namespace brigade::model
