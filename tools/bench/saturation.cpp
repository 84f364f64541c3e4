#include "tools/bench/saturation.hpp"

#include <limits>

namespace kvlane::tools::bench {

namespace {

bool waiting(const timeline_sample& s) {
  return s.without_slot_interactive + s.without_slot_batch > 0;
}

} // namespace

saturation_figure saturation_throughput(std::span<const timeline_sample> timeline) {
  double tokens = 0;
  saturation_figure f;
  for (std::size_t i = 1; i < timeline.size(); ++i) {
    const auto& a = timeline[i - 1];
    const auto& b = timeline[i];
    if (!waiting(a) || !waiting(b) || b.t_s <= a.t_s || b.tokens_generated < a.tokens_generated)
      continue;
    tokens += static_cast<double>(b.tokens_generated - a.tokens_generated);
    f.saturated_s += b.t_s - a.t_s;
  }
  f.tok_s = f.saturated_s > 0 ? tokens / f.saturated_s : std::numeric_limits<double>::quiet_NaN();
  return f;
}

} // namespace kvlane::tools::bench
