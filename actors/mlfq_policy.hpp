#pragma once

// kvlane::actors::mlfq_policy — the order in which a model's sequences deserve
// its KV slots: a skip-join multi-level feedback queue (docs/scheduling.md).
//
// Each sequence carries an `mlfq_position`: its priority class, its level, the
// steps of its level's quantum it used, its turn (a counter value: lower is
// earlier) and the steps it waited without a slot. Rank order is (class,
// level, turn), with clients interleaved round-robin inside each (class,
// level). Level i grants `quantum_steps << i` steps (4x that below level 0
// when transfers cannot overlap compute: fewer, larger switches); a sequence
// that used them drops one level and takes a new turn, i.e. goes to the back.
// A new sequence enters at the first level whose quantum covers its prefill
// (skip-join); one that waited `aging_steps` steps without a slot returns to
// level 0. The other rank orders (docs/scheduling.md) have no levels: by
// arrival (fcfs) or by (class, arrival) (prio-fcfs, recompute).
//
// Pure: values in, decisions out; no clock, no actor. Threading: a plain
// value owned by one scheduler.

#include "actors/messages.hpp"
#include "actors/policy.hpp"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvlane::actors {

/// A sequence's place in the queue. Owned by the sequence, changed only by
/// the policy.
struct mlfq_position {
  priority_class cls = priority_class::interactive;
  std::uint32_t level = 0;
  std::uint32_t quantum_used = 0; ///< steps used of this level's quantum
  std::uint64_t turn = 0;         ///< lower runs first within a (class, level)
  std::uint64_t waited_steps = 0; ///< successful steps since it last held a slot
  /// Can no longer meet its class's TTFT objective (goodput, mlfq order
  /// only): ranks after every sequence of its class that still can, by turn,
  /// until aging returns it to the top.
  bool demoted = false;
};

/// Knobs that may change while sequences run (kvlane reload).
struct mlfq_knobs {
  std::uint32_t quantum_steps = 64; ///< level 0's quantum; clamped to >= 1
  std::uint32_t levels = 4;         ///< clamped to >= 1
  std::uint32_t aging_steps = 0;    ///< 0: no aging
};

/// What is fixed for a model's lifetime.
struct mlfq_setup {
  rank_order order = rank_order::mlfq; ///< levels and quanta only with mlfq
  bool serialized_fallback = false;    ///< 4x quanta below level 0
  std::uint32_t max_prefill_chunk = 1; ///< tokens one prefill step covers
};

/// One candidate of `mlfq_policy::rank`.
struct rank_entry {
  const mlfq_position* position = nullptr;
  std::string_view client;
};

class mlfq_policy {
public:
  mlfq_policy() : mlfq_policy({}, {}) {}
  mlfq_policy(mlfq_setup setup, mlfq_knobs knobs);

  void set_knobs(mlfq_knobs knobs) noexcept;
  const mlfq_knobs& knobs() const noexcept { return knobs_; }
  const mlfq_setup& setup() const noexcept { return setup_; }

  /// The steps a sequence may run at `level` before it drops a level.
  std::uint32_t quantum_of(std::uint32_t level) const noexcept;

  /// Skip-join: the first level whose quantum covers the prefill of a
  /// `prompt_len`-token prompt (0 without levels).
  std::uint32_t initial_level(std::uint32_t prompt_len) const noexcept;

  /// The position of a newly arrived sequence: its entry level, the next turn.
  mlfq_position enter(priority_class cls, std::uint32_t prompt_len) noexcept;

  /// Charges one step the sequence ran in: after its quantum it drops one
  /// level (if there is one) and goes to the back.
  void charge_step(mlfq_position& p) noexcept;

  /// Called for every live sequence after each successful step: one that
  /// holds no slot waits one more step and, after `aging_steps`, returns to
  /// level 0 (keeping its turn); one that holds a slot starts waiting anew.
  /// The rule for one sequence; the scheduler applies it through
  /// `aging_queue`, which finds the sequences due without visiting the rest
  /// (and keeps their waits itself, not in `waited_steps`).
  void age(mlfq_position& p, bool resident) const noexcept;

  /// Whether `age` does anything: aging_steps > 0 and the mlfq order.
  bool ages() const noexcept;

  /// What aging does to a sequence that waited long enough: back to level 0,
  /// its quantum unused, keeping its turn; no longer demoted.
  static void return_to_top(mlfq_position& p) noexcept;

  /// Indices into `entries`, best first: by turn (arrival), by (class, turn)
  /// (priority), or by (class, demoted, level, turn) (mlfq) with clients
  /// interleaved round-robin inside each group in the order of their earliest
  /// turn there.
  std::vector<std::size_t> rank(std::span<const rank_entry> entries) const;

private:
  mlfq_setup setup_;
  mlfq_knobs knobs_;
  std::uint64_t next_turn_ = 1;
};

/// The level a position ranks at: a demoted one ranks in its class's one
/// demoted group, by turn alone.
inline std::uint32_t rank_level(const mlfq_position& p) noexcept {
  return p.demoted ? 0 : p.level;
}

/// Strict-weak order of two positions by (class, demoted, level, turn).
inline bool ranks_before(const mlfq_position& a, const mlfq_position& b) noexcept {
  if (a.cls != b.cls)
    return a.cls < b.cls;
  if (a.demoted != b.demoted)
    return b.demoted;
  if (rank_level(a) != rank_level(b))
    return rank_level(a) < rank_level(b);
  return a.turn < b.turn;
}

} // namespace kvlane::actors
