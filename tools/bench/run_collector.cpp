#include "tools/bench/run_collector.hpp"

#include <algorithm>

namespace kvlane::tools::bench {

bool run_collector::sent(std::size_t index, const trace_request& r, const turn_gate::release& rel,
                         std::string refusal) {
  const bool accepted = refusal.empty();
  {
    std::lock_guard lock{mutex};
    auto& o = (*outcomes)[index];
    if (rel.held) // past its trace time, waiting for the previous turn's end
      o.held_ms = std::max(0.0, std::chrono::duration<double, std::milli>(rel.due - start).count()
                                    * time_scale
                                  - r.arrival_s * 1000.0);
    o.submitted = accepted;
    o.error = std::move(refusal);
  }
  if (!accepted && gate)
    gate->ended(index); // its next turn goes on without it
  return accepted;
}

} // namespace kvlane::tools::bench
