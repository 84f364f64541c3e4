#pragma once

// kvlane::tools::bench — saturation: output tokens per second counted only
// while requests were waiting.
//
// Problem it solves: on open-loop arrivals below saturation every mode's
// throughput is the arrival rate. While some request waits without a slot the
// engine is saturated, and tokens per second over those intervals measure
// what the mode gets out of the device. Computed from the gauge timeline:
// an interval between two samples counts when a request was without a slot at
// both of its ends.
//
// Pure: values in, value out.

#include "tools/bench/bench_runner.hpp"

#include <span>

namespace kvlane::tools::bench {

struct saturation_figure {
  double tok_s = 0;       ///< NaN when the run never saturated
  double saturated_s = 0; ///< simulated seconds counted
};

saturation_figure saturation_throughput(std::span<const timeline_sample> timeline);

} // namespace kvlane::tools::bench
