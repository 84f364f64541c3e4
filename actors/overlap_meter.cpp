#include "actors/overlap_meter.hpp"

#include "common/elapsed.hpp"

#include <algorithm>

namespace kvlane::actors {

void overlap_meter::add_step(time_point start, time_point end) {
  steps_.emplace_back(start, end);
  if (steps_.size() > 64)
    steps_.erase(steps_.begin(), steps_.begin() + 32);
}

double overlap_meter::hidden_ms(time_point start, time_point end,
                                std::optional<time_point> running_since) const {
  double hidden = 0;
  for (auto& [s, e] : steps_) {
    auto lo = std::max(start, s);
    auto hi = std::min(end, e);
    if (lo < hi)
      hidden += ms_between(lo, hi);
  }
  // A step still running overlaps the transfer from its start on.
  if (running_since) {
    auto lo = std::max(start, *running_since);
    if (lo < end)
      hidden += ms_between(lo, end);
  }
  return std::min(hidden, ms_between(start, end));
}

} // namespace kvlane::actors
