#include "actors/aging_queue.hpp"

#include <algorithm>
#include <iterator>

namespace kvlane::actors {

void aging_queue::list(const wait& w, seq_id id) {
  if (!ages(w))
    return;
  above_by_since_.emplace(w.since, id);
  if (w.ran > 0)
    by_stretch_.emplace(w.since + w.ran, id);
}

void aging_queue::unlist(const wait& w, seq_id id) {
  if (!ages(w))
    return;
  above_by_since_.erase({w.since, id});
  if (w.ran > 0)
    by_stretch_.erase({w.since + w.ran, id});
}

bool aging_queue::enter(seq_id id, bool above_top) {
  auto [it, added] = waits_.try_emplace(id, wait{now_, 0, 0, above_top, false});
  if (added)
    list(it->second, id);
  return added;
}

void aging_queue::leave(seq_id id) {
  // A resident that leaves stays in residents_ until the next step, which
  // skips ids it does not know.
  auto it = waits_.find(id);
  if (it == waits_.end())
    return;
  unlist(it->second, id);
  waits_.erase(it);
}

void aging_queue::set_above_top(seq_id id, bool above_top) {
  auto it = waits_.find(id);
  if (it == waits_.end() || it->second.above_top == above_top)
    return;
  auto& w = it->second;
  unlist(w, id);
  w.above_top = above_top;
  list(w, id);
}

std::uint64_t aging_queue::waited(seq_id id) const {
  auto it = waits_.find(id);
  return it == waits_.end() || it->second.resident ? 0 : now_ - it->second.since;
}

std::vector<seq_id> aging_queue::step(std::span<const seq_id> residents,
                                      std::uint32_t aging_steps) {
  ++now_;
  std::vector<seq_id> now_resident(residents.begin(), residents.end());
  std::sort(now_resident.begin(), now_resident.end());
  now_resident.erase(std::unique(now_resident.begin(), now_resident.end()), now_resident.end());
  std::vector<seq_id> left, took;
  std::set_difference(residents_.begin(), residents_.end(), now_resident.begin(),
                      now_resident.end(), std::back_inserter(left));
  std::set_difference(now_resident.begin(), now_resident.end(), residents_.begin(),
                      residents_.end(), std::back_inserter(took));
  for (auto id : left) {
    // Resident at the previous step: it has waited since then.
    auto it = waits_.find(id);
    if (it == waits_.end())
      continue;
    auto& w = it->second;
    w.resident = false;
    w.ran += now_ - w.took_at; // resident at steps took_at .. now_ - 1
    w.since = now_ - 1;
    list(w, id);
  }
  for (auto id : took) {
    auto it = waits_.find(id);
    if (it == waits_.end())
      continue;
    unlist(it->second, id);
    it->second.resident = true;
    it->second.took_at = now_;
  }
  residents_ = std::move(now_resident);
  std::vector<seq_id> due;
  if (aging_steps == 0)
    return due;
  // Due: waited aging_steps, or (a run that held a slot before) as long as it ran.
  const auto take = [&](seq_id id) {
    auto& w = waits_.at(id);
    unlist(w, id);
    w.since = now_;
    w.above_top = false;
    due.push_back(id);
  };
  while (!above_by_since_.empty() && now_ - above_by_since_.begin()->first >= aging_steps)
    take(above_by_since_.begin()->second);
  while (!by_stretch_.empty() && by_stretch_.begin()->first <= now_)
    take(by_stretch_.begin()->second);
  return due;
}

} // namespace kvlane::actors
