#include "tools/bench/turn_gate.hpp"

#include <algorithm>

namespace kvlane::tools::bench {

turn_gate::turn_gate(std::span<const trace_request> requests, clock::time_point start,
                     double time_scale)
  : ended_at_(requests.size()) {
  const double ts = time_scale > 0 ? time_scale : 1.0;
  due_.reserve(requests.size());
  previous_.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    due_.push_back(start + std::chrono::duration_cast<clock::duration>(
                             std::chrono::duration<double, std::milli>(r.arrival_s * 1000.0 / ts)));
    // Only an earlier request can be waited for: anything else would hold
    // the turn (and the ones after it) forever.
    previous_.push_back(r.previous_turn >= 0 && static_cast<std::size_t>(r.previous_turn) < i
                          ? r.previous_turn
                          : -1);
  }
}

std::optional<turn_gate::release> turn_gate::next(clock::time_point deadline) {
  std::unique_lock lock{mutex_};
  for (;;) {
    if (!released_.empty()) {
      const auto r = released_.front();
      released_.pop_front();
      return r;
    }
    if (cursor_ < due_.size()) {
      const std::size_t i = cursor_;
      if (clock::now() >= due_[i]) {
        ++cursor_;
        const auto p = previous_[i];
        if (p < 0)
          return release{i, due_[i], false};
        if (const auto& end = ended_at_[static_cast<std::size_t>(p)])
          return release{i, std::max(due_[i], *end), *end > due_[i]};
        held_.emplace(static_cast<std::size_t>(p), i);
        continue;
      }
      if (cv_.wait_until(lock, std::min(due_[i], deadline)) == std::cv_status::timeout
          && clock::now() >= deadline)
        return std::nullopt;
      continue;
    }
    if (held_.empty())
      return std::nullopt;
    if (!cv_.wait_until(lock, deadline, [&] { return !released_.empty(); }))
      return std::nullopt;
  }
}

void turn_gate::ended(std::size_t index) {
  {
    std::lock_guard lock{mutex_};
    if (index >= ended_at_.size() || ended_at_[index])
      return;
    const auto now = clock::now();
    ended_at_[index] = now;
    if (const auto it = held_.find(index); it != held_.end()) {
      released_.push_back(release{it->second, now, true});
      held_.erase(it);
    }
  }
  cv_.notify_all();
}

} // namespace kvlane::tools::bench
