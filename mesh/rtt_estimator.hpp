#pragma once
// A link's round-trip time as the planner should see it: the least of the recent heartbeat
// samples. One sample is what the network did plus whatever delayed either process that moment
// (a node measuring its speed at start-up, a burst of activations to seal); those delays only
// ever add, so the minimum over a short window tracks the path itself, and plans computed from it
// do not flip on a single late reply. The window slides, so a link that really gets slower shows
// it after `kWindow` samples.

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>

namespace brigade::mesh {

class RttEstimator {
public:
    static constexpr std::size_t kWindow = 8;

    void add(std::chrono::microseconds sample);
    // Least of the last kWindow samples; none before the first.
    std::optional<std::chrono::microseconds> estimate() const;

private:
    std::array<std::chrono::microseconds, kWindow> ring_{};
    std::size_t count_ = 0;  // samples ever added
};

}  // namespace brigade::mesh
