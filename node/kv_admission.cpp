#include "node/kv_admission.hpp"

namespace brigade::node {

std::optional<KvRefusal> reserve_kv(model::KvCache& kv, std::uint64_t seq_id,
                                    std::int64_t n_positions) {
    auto reserved = kv.reserve(seq_id, n_positions);
    if (reserved) return std::nullopt;
    KvRefusal refusal;
    if (n_positions > kv.limits().max_positions || !kv.fits_budget_alone(n_positions)) {
        refusal.kind = api::ErrorKind::context_length_exceeded;
        refusal.message =
            "this node's KV memory cannot hold the request: " + reserved.error().message;
    } else {
        refusal.message = "this node's KV memory is taken by other requests, retry later: " +
                          reserved.error().message;
    }
    return refusal;
}

}  // namespace brigade::node
