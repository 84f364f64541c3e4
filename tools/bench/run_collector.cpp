#include "tools/bench/run_collector.hpp"

namespace kvlane::tools::bench {

bool run_collector::sent(std::size_t index, const trace_request& r, const turn_gate::release& rel,
                         std::string refusal) {
  bool accepted = false;
  {
    std::lock_guard lock{mutex};
    accepted = record_send((*outcomes)[index], r, rel, start, time_scale, std::move(refusal));
  }
  if (!accepted && gate)
    gate->ended(index); // its next turn goes on without it
  return accepted;
}

} // namespace kvlane::tools::bench
