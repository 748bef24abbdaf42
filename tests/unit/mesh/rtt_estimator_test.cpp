#include "mesh/rtt_estimator.hpp"

#include <gtest/gtest.h>

namespace brigade::mesh {
namespace {

using us = std::chrono::microseconds;

TEST(RttEstimator, NothingBeforeTheFirstSample) {
    RttEstimator e;
    EXPECT_FALSE(e.estimate().has_value());
}

TEST(RttEstimator, OneLateReplyDoesNotMoveTheEstimate) {
    RttEstimator e;
    for (int i = 0; i < 5; ++i) e.add(us(100 + i));
    e.add(us(40'000));  // the peer was busy measuring its speed
    EXPECT_EQ(e.estimate(), us(100));
}

TEST(RttEstimator, ALinkThatGetsSlowerShowsItOnceTheWindowHasPassed) {
    RttEstimator e;
    for (int i = 0; i < 20; ++i) e.add(us(100));
    for (std::size_t i = 0; i + 1 < RttEstimator::kWindow; ++i) {
        e.add(us(5'000));
        EXPECT_EQ(e.estimate(), us(100)) << "after " << i + 1 << " slow samples";
    }
    e.add(us(5'000));
    EXPECT_EQ(e.estimate(), us(5'000));
}

TEST(RttEstimator, MinimumOfAPartlyFilledWindow) {
    RttEstimator e;
    e.add(us(300));
    EXPECT_EQ(e.estimate(), us(300));
    e.add(us(250));
    e.add(us(900));
    EXPECT_EQ(e.estimate(), us(250));
}

TEST(RttEstimator, NegativeSamplesAreIgnored) {
    RttEstimator e;
    e.add(us(-5));
    EXPECT_FALSE(e.estimate().has_value());
    e.add(us(120));
    e.add(us(-1));
    EXPECT_EQ(e.estimate(), us(120));
}

}  // namespace
}  // namespace brigade::mesh
