#pragma once

// kvlane::actors::plan_slots — which sequences hold a model's KV slots:
// ranked sequences and slot states in, admissions and evictions out.
//
// The top (slots - spare_slots) ranked sequences are the target set (all
// slots when not preemptive). A target sequence without a slot takes a free
// one at once — the spare is what lets a new interactive request start
// without waiting for a dump; a slot whose dump is under way is promised to
// the first target sequence that finds none free. When no slot is free or
// promised, the lowest-ranked resident outside the target is evicted for it,
// once the lane that would dump it has nothing queued (a recompute frees the
// slot at once and needs no lane). Then the spare slots are restored the same
// way: lowest-ranked residents outside the target go while the lane is idle;
// until then they keep computing. A resident in the running step is never a
// victim. Swap or recompute is the cost model's choice, passed in per
// sequence. A victim is taken only where preemption_pays: for a target
// sequence, its eviction must cost less than the wait it avoids (the soonest
// expected end among the residents), and no victim is taken that would end
// before its eviction is done; the lowest-ranked resident for which that
// holds is the victim. Where the objectives are known, the eviction must also
// save the waiter's TTFT objective and not break the victim's (unless the
// waiter's class is higher), and one made for latency alone takes no victim
// evicted before; the k-th target sequence left without a slot waits, if
// nothing is evicted, for the k-th soonest expected end.
//
// Carrying out a decision can turn out otherwise than asked (the store may
// have no room for a swap, a parked snapshot may have been evicted), and later
// decisions depend on it, so the planner hands each decision to a
// `slot_actions` at once and continues from what it reports.
//
// Pure: no clock, no actor, no store. Threading: call from one thread.

#include "actors/messages.hpp"
#include "actors/preemption_rule.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvlane::actors {

/// Where a sequence's KV is.
enum class kv_state : std::uint8_t {
  queued,   ///< nowhere: new, or dropped to be recomputed
  resident, ///< in a slot (prefilling or decoding)
  dumping,  ///< its slot is being copied to the store
  parked,   ///< in the store
  loading,  ///< its snapshot is being copied back into a slot
};
std::string_view to_string(kv_state s) noexcept;

/// How a resident sequence leaves its slot.
enum class eviction : std::uint8_t {
  swap,      ///< dump the slot to the store, load it back later
  recompute, ///< drop the KV, prefill everything again later
};
std::string_view to_string(eviction e) noexcept;

/// One live sequence as the planner sees it.
struct slot_candidate {
  seq_id id = 0;
  kv_state state = kv_state::queued;
  std::optional<slot_id> slot;
  bool in_step = false;           ///< part of the running step: cannot be evicted now
  bool recompute_cheaper = false; ///< the cost model's choice if it is evicted
  // Residents, for preemption_pays (actors/preemption_rule); the defaults
  // (nothing known) leave every eviction to the rank order.
  double eviction_ms = 0; ///< what evicting it costs, the way recompute_cheaper says
  /// What the eviction adds to the other slot holders' runs, summed: its
  /// transfers or re-prefill where they stall the steps, else 0.
  double others_delay_ms = 0;
  double expected_end_ms = preemption_case::unknown; ///< until it ends if left alone
  double end_at_most_ms = preemption_case::unknown;  ///< until it ends at the latest
  // Goodput figures (actors/preemption_rule), unknown where not known.
  priority_class cls = priority_class::interactive;
  /// How long it may still wait (waiting) or stall (resident) and meet its
  /// objective ([scheduler.slo]); negative: it misses it anyway.
  double slack_ms = preemption_case::unknown;
  /// Waiting sequences: how long it runs once admitted (its prefill or load,
  /// then its expected output).
  double service_ms = preemption_case::unknown;  /// Evicted before (preemption_case::victim_preempted_before).
  bool preempted_before = false;
};

struct slot_plan_input {
  std::span<const slot_candidate> ranked;         ///< live sequences, best first
  std::span<const std::optional<seq_id>> owners;  ///< per slot: who holds it
  std::uint32_t dumping = 0;           ///< slots whose dump is under way
  std::uint32_t transfers_pending = 0; ///< queued or running on the lane that dumps
  std::uint32_t spare_slots = 1;
  bool preemptive = true; ///< false: fcfs, a sequence waits for a free slot
};

/// Carries out one decision at once and reports how it turned out.
class slot_actions {
public:
  virtual ~slot_actions() = default;

  /// Gives `slot` to a queued or parked sequence. Returns its new state:
  /// `resident` (prefill from position 0: it was queued, or its snapshot is
  /// gone) or `loading` (a load was queued on the lane).
  virtual kv_state admit(seq_id id, slot_id slot) = 0;

  /// Evicts a resident sequence. Returns its new state: `dumping` (a dump was
  /// queued on the lane; the slot frees when it ends) or `queued` (its KV was
  /// dropped and the slot is free now; a swap the store cannot hold ends so).
  virtual kv_state evict(seq_id id, eviction how) = 0;
};

/// Plans one round and carries it out through `actions`.
void plan_slots(const slot_plan_input& in, slot_actions& actions);

/// How many of the best ranked sequences `plan_slots` treats as the target
/// set for `slots` slots. Only these may be admitted; beyond them the planner
/// looks only at residents (for victims). So `ranked` may hold just the best
/// `plan_target_size` sequences followed by the other residents, in their
/// rank order, and the plan is the same as with every live sequence.
std::size_t plan_target_size(std::size_t slots, std::uint32_t spare_slots,
                             bool preemptive) noexcept;

/// How many of `slots` the planner keeps free for a new interactive request:
/// the spare, at most all slots but one, and none where it does not preempt
/// (it cannot take a spare back). `plan_target_size` + this = `slots`.
std::uint32_t plan_spare(std::size_t slots, std::uint32_t spare_slots, bool preemptive) noexcept;

} // namespace kvlane::actors
