#include "actors/policy.hpp"

namespace kvlane::actors {

std::string_view to_string(scheduler_mode m) noexcept {
  switch (m) {
    case scheduler_mode::fcfs: return "fcfs";
    case scheduler_mode::sync: return "sync";
    case scheduler_mode::overlap: return "overlap";
    case scheduler_mode::ideal: return "ideal";
  }
  return "unknown";
}

transfer_placement place_transfers(scheduler_mode mode, bool backend_overlaps) noexcept {
  transfer_placement p;
  p.fallback = mode == scheduler_mode::overlap && !backend_overlaps;
  p.on_compute_lane = mode == scheduler_mode::sync || p.fallback;
  return p;
}

} // namespace kvlane::actors
