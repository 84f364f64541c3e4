#include "actors/aging_queue.hpp"

namespace kvlane::actors {

bool aging_queue::enter(seq_id id, bool above_top) {
  auto [it, added] = waits_.try_emplace(id, wait{now_, above_top});
  if (added && above_top)
    above_by_since_.emplace(now_, id);
  return added;
}

void aging_queue::leave(seq_id id) {
  auto it = waits_.find(id);
  if (it == waits_.end())
    return;
  if (it->second.above_top)
    above_by_since_.erase({it->second.since, id});
  waits_.erase(it);
}

void aging_queue::set_above_top(seq_id id, bool above_top) {
  auto it = waits_.find(id);
  if (it == waits_.end() || it->second.above_top == above_top)
    return;
  it->second.above_top = above_top;
  if (above_top)
    above_by_since_.emplace(it->second.since, id);
  else
    above_by_since_.erase({it->second.since, id});
}

std::uint64_t aging_queue::waited(seq_id id) const {
  auto it = waits_.find(id);
  return it == waits_.end() ? 0 : now_ - it->second.since;
}

void aging_queue::restart(seq_id id, wait& w) {
  if (w.above_top) {
    above_by_since_.erase({w.since, id});
    above_by_since_.emplace(now_, id);
  }
  w.since = now_;
}

std::vector<seq_id> aging_queue::step(std::span<const seq_id> residents,
                                      std::uint32_t aging_steps) {
  ++now_;
  for (auto id : residents)
    if (auto it = waits_.find(id); it != waits_.end())
      restart(id, it->second);
  std::vector<seq_id> due;
  if (aging_steps == 0)
    return due;
  // The residents were just moved to `now`: everything due is waiting.
  while (!above_by_since_.empty() && now_ - above_by_since_.begin()->first >= aging_steps) {
    const auto id = above_by_since_.begin()->second;
    above_by_since_.erase(above_by_since_.begin());
    auto& w = waits_.at(id);
    w.since = now_;
    w.above_top = false;
    due.push_back(id);
  }
  return due;
}

} // namespace kvlane::actors
