#include "actors/policy.hpp"

namespace kvlane::actors {

std::string_view to_string(scheduler_mode m) noexcept {
  switch (m) {
    case scheduler_mode::fcfs: return "fcfs";
    case scheduler_mode::prio_fcfs: return "prio-fcfs";
    case scheduler_mode::recompute: return "recompute";
    case scheduler_mode::sync: return "sync";
    case scheduler_mode::overlap: return "overlap";
    case scheduler_mode::free_transfer: return "free-transfer";
  }
  return "unknown";
}

std::optional<scheduler_mode> parse_scheduler_mode(std::string_view name) noexcept {
  if (name == "ideal")
    return scheduler_mode::free_transfer;
  for (auto m : all_scheduler_modes)
    if (to_string(m) == name)
      return m;
  return std::nullopt;
}

mode_rules rules_of(scheduler_mode mode) noexcept {
  mode_rules r;
  switch (mode) {
    case scheduler_mode::fcfs:
      r.order = rank_order::arrival;
      r.preempts = r.swaps = r.keeps_spare = false;
      break;
    case scheduler_mode::prio_fcfs:
      r.order = rank_order::priority;
      r.preempts = r.swaps = r.keeps_spare = false;
      break;
    case scheduler_mode::recompute:
      // vLLM's priority scheduling: every slot runs; a waiting request that
      // outranks a running one takes its slot, and the victim re-prefills.
      r.order = rank_order::priority;
      r.swaps = r.keeps_spare = false;
      break;
    case scheduler_mode::sync:
    case scheduler_mode::overlap: break;
    case scheduler_mode::free_transfer: r.free_transfers = true; break;
  }
  return r;
}

transfer_placement place_transfers(scheduler_mode mode, bool backend_overlaps) noexcept {
  transfer_placement p;
  p.fallback = mode == scheduler_mode::overlap && !backend_overlaps;
  p.on_compute_lane = mode == scheduler_mode::sync || p.fallback;
  p.long_quanta = p.on_compute_lane && rules_of(mode).order == rank_order::mlfq;
  return p;
}

} // namespace kvlane::actors
