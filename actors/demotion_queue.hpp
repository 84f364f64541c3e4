#pragma once

// kvlane::actors::demotion_queue — which sequences can no longer meet their
// class's time-to-first-token objective, found without a pass over the queue.
//
// Goodput (docs/scheduling.md "Goodput"): when not everything can meet its
// objective, the sequences that still can are served first. A sequence whose
// first token is still to come is demoted once its slack (how long it may
// still wait and meet its TTFT objective, actors/preemption_figures) is
// negative: it then ranks after every sequence of its class that still can
// (mlfq_position::demoted), by turn, until aging returns it to the top.
//
// While a sequence waits, its slack falls one for one with time, so it is
// checked once at the instant its slack reaches zero, not at every event:
// the queue keeps each watched sequence's next check, and `due` hands out the
// ones whose instant has come. `judge` is the rule for one check; the caller
// computes the slack with the figures of that instant and either demotes the
// sequence or watches it again.
//
// Pure: no clock (instants are passed in), no actor. Threading: a plain value
// owned by one scheduler.

#include "actors/messages.hpp"

#include <chrono>
#include <cstddef>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlane::actors {

/// The outcome of one check of a sequence before its first token.
struct demotion_verdict {
  bool demote = false;
  double recheck_in_ms = 0; ///< when not demoted: the next check, this long from now
};

/// One check. `slack_ms`: the sequence's slack now, infinite where the cost
/// model cannot tell yet; `waited_ms`: since it arrived; `ttft_ms`: its
/// class's objective. Unknown slack demotes only once the objective itself
/// has passed; a known one demotes below zero and is otherwise checked again
/// when it would reach zero (at least 1 ms later, so a drifting estimate
/// cannot make the scheduler spin).
demotion_verdict judge_demotion(double slack_ms, double waited_ms, double ttft_ms) noexcept;

class demotion_queue {
public:
  using time_point = std::chrono::steady_clock::time_point;

  std::size_t size() const noexcept { return at_.size(); }
  bool watched(seq_id id) const { return at_.contains(id); }

  /// Checks `id` at `at` (replacing an earlier instant).
  void watch(seq_id id, time_point at);
  /// No more checks of `id` (it ended, or has its first token).
  void forget(seq_id id);
  /// The sequences whose instant is at or before `now`, earliest first; they
  /// are no longer watched.
  std::vector<seq_id> due(time_point now);

private:
  std::set<std::pair<time_point, seq_id>> by_time_;
  std::unordered_map<seq_id, time_point> at_;
};

} // namespace kvlane::actors
