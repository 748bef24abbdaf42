#include "mesh/rtt_estimator.hpp"

#include <algorithm>

namespace brigade::mesh {

void RttEstimator::add(std::chrono::microseconds sample) {
    if (sample.count() < 0) return;  // a clock step, not a measurement
    ring_[count_ % kWindow] = sample;
    ++count_;
}

std::optional<std::chrono::microseconds> RttEstimator::estimate() const {
    if (count_ == 0) return std::nullopt;
    const std::size_t n = std::min(count_, kWindow);
    return *std::min_element(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace brigade::mesh
