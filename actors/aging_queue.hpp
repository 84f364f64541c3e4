#pragma once

// kvlane::actors::aging_queue — which waiting sequences have waited
// `aging_steps` steps without a slot, found without a pass over all of them.
//
// `mlfq_policy::age` states the rule for one sequence after each successful
// step: a resident starts waiting anew; any other sequence waits one more
// step and, once it has waited `aging_steps` while above level 0, returns to
// level 0. Applying it to every live sequence after every step costs O(n) per
// step. Here a step is a counter; each waiting sequence keeps the step since
// which it has waited, so its wait is `now - since`; the waiting sequences
// above level 0 are ordered by `since`, and the ones due are taken from the
// front. Residents are not in that order: a step compares its residents with
// the previous step's, and only a sequence that took or left a slot moves. A
// step costs O(slots) plus O(log n) per such change and per sequence due.
//
// The caller reports what changes a sequence's place here: it arrives or
// leaves, rises above level 0 (`charge_step` dropped it) or not. Steps are
// counted only while aging is on, as `mlfq_policy::age` does nothing while
// it is off.
//
// Pure: no clock, no actor. Threading: a plain value owned by one scheduler.

#include "actors/messages.hpp"

#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlane::actors {

class aging_queue {
public:
  /// Steps counted so far.
  std::uint64_t now() const noexcept { return now_; }
  std::size_t size() const noexcept { return waits_.size(); }

  /// A new sequence: it starts waiting now. False if it is known already.
  bool enter(seq_id id, bool above_top);

  /// Forgets a sequence that ended or was cancelled.
  void leave(seq_id id);

  /// Whether the sequence is above level 0 (only those can age).
  void set_above_top(seq_id id, bool above_top);

  /// Steps a sequence has waited (0 if unknown).
  std::uint64_t waited(seq_id id) const;

  /// One successful step: `residents` (sequences in a slot) start waiting
  /// anew, every other one waits one step more. Returns those above level 0
  /// that have now waited `aging_steps` (> 0), in no particular order: the
  /// caller returns them to level 0; here they start waiting anew and count
  /// as at level 0.
  std::vector<seq_id> step(std::span<const seq_id> residents, std::uint32_t aging_steps);

private:
  struct wait {
    std::uint64_t since = 0; ///< while waiting: the last step it was resident (or arrived)
    bool above_top = false;
    bool resident = false; ///< in a slot at the last step
  };

  /// In the due order: waiting and above level 0.
  static bool ages(const wait& w) noexcept { return w.above_top && !w.resident; }

  std::uint64_t now_ = 0;
  std::vector<seq_id> residents_; ///< at the last step, sorted
  std::unordered_map<seq_id, wait> waits_;
  /// (since, id) of the waiting sequences above level 0, longest waiting first.
  std::set<std::pair<std::uint64_t, seq_id>> above_by_since_;
};

} // namespace kvlane::actors
