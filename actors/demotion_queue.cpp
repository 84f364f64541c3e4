#include "actors/demotion_queue.hpp"

#include <algorithm>
#include <cmath>

namespace kvlane::actors {

demotion_verdict judge_demotion(double slack_ms, double waited_ms, double ttft_ms) noexcept {
  constexpr double min_recheck_ms = 1;
  if (std::isfinite(slack_ms)) {
    if (slack_ms < 0)
      return {true, 0};
    return {false, std::max(slack_ms, min_recheck_ms)};
  }
  if (waited_ms >= ttft_ms)
    return {true, 0};
  return {false, std::max(ttft_ms - waited_ms, min_recheck_ms)};
}

void demotion_queue::watch(seq_id id, time_point at) {
  auto [it, added] = at_.try_emplace(id, at);
  if (!added) {
    by_time_.erase({it->second, id});
    it->second = at;
  }
  by_time_.emplace(at, id);
}

void demotion_queue::forget(seq_id id) {
  auto it = at_.find(id);
  if (it == at_.end())
    return;
  by_time_.erase({it->second, id});
  at_.erase(it);
}

std::vector<seq_id> demotion_queue::due(time_point now) {
  std::vector<seq_id> out;
  while (!by_time_.empty() && by_time_.begin()->first <= now) {
    out.push_back(by_time_.begin()->second);
    at_.erase(by_time_.begin()->second);
    by_time_.erase(by_time_.begin());
  }
  return out;
}

} // namespace kvlane::actors
