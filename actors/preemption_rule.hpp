#pragma once

// kvlane::actors::preemption_pays — whether evicting one resident sequence
// for a waiting one is worth what the eviction costs.
//
// An eviction costs the device work that would not happen otherwise: the
// victim's load when it comes back (plus its dump where the dump stalls
// compute), or the re-prefill of its KV. What the waiting sequence gains is
// the wait it avoids: without the eviction it takes the first slot that frees
// on its own, when the resident expected to end first ends. So the eviction
// pays only when it costs less than that wait. And a victim that would end
// before its eviction is done (by its expected length, or for certain by its
// max_tokens) is never evicted: the slot frees sooner by leaving it alone.
//
// Goodput: where the waiter's latency objective is known (its class's TTFT in
// [scheduler.slo], how long it has waited, what its start costs), the
// objectives decide who may pay for whom. An eviction that saves the waiter's
// objective (it misses its TTFT if it waits for a slot and meets it if the
// eviction goes ahead) goes ahead unless it costs the victim an objective the
// victim would otherwise meet (its TPOT, or its TTFT while it has no token
// yet); a waiter of a higher class (an interactive request over a batch one)
// may cost it that too. An eviction that does not decide the waiter's
// objective never costs the victim one: a waiter that meets its objective
// anyway still starts sooner where the victim keeps its own and the wait it
// avoids is more than all the eviction delays (the victim's restart, and
// every other slot holder's stall where the transfer or re-prefill stops the
// steps): the wait is latency users see. But latency alone takes a run's slot
// at most once: a victim evicted before gives its slot again only to save an
// objective (or to a higher class, below), so a long run is not sliced again
// and again behind every newer one and left to finish alone at the end. One
// that misses it either way is demoted, and evicts only a lower class (so a
// late interactive request still goes ahead of batch work with time to spare).
//
// Unknown figures (a cost model that has measured nothing yet, a resident
// with no estimate) leave the choice to the rank order: the eviction goes
// ahead, which also measures the costs.
//
// Pure: values in, a verdict out; no clock. docs/scheduling.md, "Preemption
// only when it pays".

#include <cstdint>
#include <limits>

namespace kvlane::actors {

/// The figures of one possible eviction, in milliseconds.
struct preemption_case {
  static constexpr double unknown = std::numeric_limits<double>::infinity();

  /// What evicting the victim adds: a swap's load (and exposed dump), or a
  /// recompute's prefill. 0 when not known.
  double eviction_ms = 0;
  /// Expected time until the victim ends if left alone. `unknown` if not known.
  double victim_expected_ms = unknown;
  /// Time until the victim ends at the latest (its max_tokens). `unknown` if
  /// not known.
  double victim_at_most_ms = unknown;
  /// Expected wait of the waiting sequence for a slot without evicting: the
  /// soonest expected end among the residents. `unknown` if not known.
  double wait_avoided_ms = unknown;
  /// What the eviction adds to the other slot holders' runs, summed (its
  /// transfers or re-prefill where they stall every step; 0 where a lane
  /// hides them).
  double others_delay_ms = 0;

  // -- goodput: all unknown leaves the rule above alone -----------------------------

  /// The waiter: how long it runs once it holds a slot (its prefill or load,
  /// then its expected output), and its slack: how long it may still wait for
  /// a slot and meet its objective (negative: it misses it whatever happens).
  double waiter_service_ms = unknown;
  double waiter_slack_ms = unknown;
  /// The waiter's class is above the victim's.
  bool waiter_outranks = false;
  /// How long the victim may stall and still meet its objective (negative:
  /// it misses it anyway).
  double victim_slack_ms = unknown;
  /// The victim has been evicted before (and came back).
  bool victim_preempted_before = false;
};

/// True when the eviction described by `c` should go ahead.
bool preemption_pays(const preemption_case& c) noexcept;

/// The goodput part alone: whether the eviction saves the waiter's objective
/// (it misses it waiting for the slot, meets it with the eviction). Unknown
/// figures: true.
bool eviction_saves_waiter(const preemption_case& c) noexcept;

/// Whether the eviction cuts the total wait: the waiter's avoided wait is
/// more than the eviction plus the delay it adds to the other slot holders.
bool latency_saved(const preemption_case& c) noexcept;

/// Whether the waiter misses its objective even with the eviction (its slack
/// is shorter than the eviction). Unknown figures: false.
bool eviction_misses_waiter_anyway(const preemption_case& c) noexcept;

/// Whether the eviction costs the victim an objective it would meet if left
/// alone: it stalls for the eviction and then until a slot frees (the
/// waiter's run or the soonest other end). Unknown figures: false.
bool eviction_breaks_victim(const preemption_case& c) noexcept;

} // namespace kvlane::actors
