#include "api/stop_matcher.hpp"

#include <algorithm>
#include <utility>

namespace brigade::api {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
    for (auto& stop : stops) {
        if (!stop.empty()) stops_.push_back(std::move(stop));
    }
}

std::string StopMatcher::feed(std::string_view text) {
    if (stopped_) return {};
    if (stops_.empty()) return std::string(text);
    pending_.append(text);

    // The earliest full match wins; at equal positions the longer stop string (it covers more).
    std::size_t best_pos = std::string::npos;
    const std::string* best = nullptr;
    for (const auto& stop : stops_) {
        const std::size_t pos = pending_.find(stop);
        if (pos == std::string::npos) continue;
        if (pos < best_pos || (pos == best_pos && stop.size() > best->size())) {
            best_pos = pos;
            best = &stop;
        }
    }
    if (best != nullptr) {
        stopped_ = true;
        matched_ = *best;
        std::string out = pending_.substr(0, best_pos);
        pending_.clear();
        return out;
    }

    // Hold back the longest tail that is a proper prefix of some stop string. `pending_` never
    // holds a full match here, so it stays shorter than the longest stop string.
    std::size_t hold = 0;
    for (const auto& stop : stops_) {
        const std::size_t max_k = std::min(stop.size() - 1, pending_.size());
        for (std::size_t k = max_k; k > hold; --k) {
            if (std::string_view(pending_).substr(pending_.size() - k) ==
                std::string_view(stop).substr(0, k)) {
                hold = k;
                break;
            }
        }
    }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string StopMatcher::flush() {
    if (stopped_) return {};
    return std::exchange(pending_, {});
}

}  // namespace brigade::api
