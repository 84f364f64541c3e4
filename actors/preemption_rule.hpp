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
// Unknown figures (a cost model that has measured nothing yet, a resident
// with no estimate) leave the choice to the rank order: the eviction goes
// ahead, which also measures the costs.
//
// Pure: values in, a verdict out; no clock. docs/scheduling.md, "Preemption
// only when it pays".

#include <limits>

namespace kvlane::actors {

/// The figures of one possible eviction, in device milliseconds.
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
};

/// True when the eviction described by `c` should go ahead.
bool preemption_pays(const preemption_case& c) noexcept;

} // namespace kvlane::actors
