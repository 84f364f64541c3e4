#pragma once

// kvlane::ms_between — elapsed time as fractional milliseconds, the unit every
// latency figure is reported in.

#include <chrono>

namespace kvlane {

/// Milliseconds from `a` to `b` (negative when `b` is earlier), fractional.
template <class Clock, class Duration>
constexpr double ms_between(std::chrono::time_point<Clock, Duration> a,
                            std::chrono::time_point<Clock, Duration> b) noexcept {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

} // namespace kvlane
