#pragma once

// kvlane::actors::overlap_meter — how much of a transfer's time a step hid:
// the part of the transfer's interval during which the compute lane ran a
// step. Remembers the intervals of the last steps (at least 32, at most 64);
// a transfer that outlasts them is credited only with what they cover.
//
// Pure: time points are passed in, never read from a clock. Threading: a
// plain value owned by one scheduler.

#include <chrono>
#include <optional>
#include <utility>
#include <vector>

namespace kvlane::actors {

class overlap_meter {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Records a step that ran from `start` to `end`.
  void add_step(time_point start, time_point end);

  /// Milliseconds of [start, end] covered by the recorded steps and by a step
  /// running since `running_since` (if one is running), at most end - start.
  double hidden_ms(time_point start, time_point end,
                   std::optional<time_point> running_since) const;

private:
  std::vector<std::pair<time_point, time_point>> steps_;
};

} // namespace kvlane::actors
