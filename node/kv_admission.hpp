#pragma once
// Room in a stage's KV cache for the rows a request is about to run, per request: a request
// past the stage's byte budget (serve --memory less the weights) fails alone with an error
// that says whether waiting can help, and the rest of its batch runs.

#include <cstdint>
#include <optional>
#include <string>

#include "api/completion_service.hpp"
#include "model/kv_cache.hpp"

namespace brigade::node {

struct KvRefusal {
    // context_length_exceeded (400) when the sequence alone is past the budget, so no amount
    // of waiting lets it run; overloaded (429) when other sequences hold the room.
    api::ErrorKind kind = api::ErrorKind::overloaded;
    std::string message;
};

// Reserves positions [0, n_positions) of `seq_id` in `kv`; nullopt when they fit.
std::optional<KvRefusal> reserve_kv(model::KvCache& kv, std::uint64_t seq_id,
                                    std::int64_t n_positions);

}  // namespace brigade::node
