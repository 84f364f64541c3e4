#include "actors/aging_queue.hpp"

#include <algorithm>
#include <iterator>

namespace kvlane::actors {

bool aging_queue::enter(seq_id id, bool above_top) {
  auto [it, added] = waits_.try_emplace(id, wait{now_, above_top, false});
  if (added && ages(it->second))
    above_by_since_.emplace(now_, id);
  return added;
}

void aging_queue::leave(seq_id id) {
  // A resident that leaves stays in residents_ until the next step, which
  // skips ids it does not know.
  auto it = waits_.find(id);
  if (it == waits_.end())
    return;
  if (ages(it->second))
    above_by_since_.erase({it->second.since, id});
  waits_.erase(it);
}

void aging_queue::set_above_top(seq_id id, bool above_top) {
  auto it = waits_.find(id);
  if (it == waits_.end() || it->second.above_top == above_top)
    return;
  auto& w = it->second;
  if (ages(w))
    above_by_since_.erase({w.since, id});
  w.above_top = above_top;
  if (ages(w))
    above_by_since_.emplace(w.since, id);
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
    it->second.resident = false;
    it->second.since = now_ - 1;
    if (ages(it->second))
      above_by_since_.emplace(it->second.since, id);
  }
  for (auto id : took) {
    auto it = waits_.find(id);
    if (it == waits_.end())
      continue;
    if (ages(it->second))
      above_by_since_.erase({it->second.since, id});
    it->second.resident = true;
  }
  residents_ = std::move(now_resident);
  std::vector<seq_id> due;
  if (aging_steps == 0)
    return due;
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
