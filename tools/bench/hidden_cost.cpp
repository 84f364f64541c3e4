#include "tools/bench/hidden_cost.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlane::tools::bench {

double hidden_cost_share(const hidden_cost_input& in) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  if (!(in.transfer_ms > 0) || !std::isfinite(in.transfer_ms))
    return nan;
  if (in.serialized)
    return 0.0;
  if (!std::isfinite(in.covered_ms) || !std::isfinite(in.step_busy_ms)
      || !(in.modeled_step_ms > 0) || !(in.reference_stretch > 0))
    return nan;
  const double uncovered = std::max(0.0, in.transfer_ms - in.covered_ms);
  const double lengthened =
    std::max(0.0, in.step_busy_ms - in.modeled_step_ms * in.reference_stretch);
  return std::clamp(1.0 - (uncovered + lengthened) / in.transfer_ms, 0.0, 1.0);
}

} // namespace kvlane::tools::bench
