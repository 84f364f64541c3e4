#pragma once

// kvlane::actors::planning_round — one planning round of a model's scheduler: which
// sequences hold its KV slots after this event.
//
// The round gathers what the pure units decide on and hands their decisions to the
// lifecycle: the hopeless are demoted (preemption_figures), idle retained KV expires and
// warm slots are reclaimed (kv_keeper through the lifecycle), the best ranked sequences
// and the residents become candidates with their preemption costs (plan_candidates), and
// the slot planner admits and evicts (slot_planner), each decision carried out by
// `sequence_lifecycle` as it is made. actors/scheduler.cpp runs a round after each event;
// the round itself sends nothing: the lifecycle's port does.
//
// Threading: the scheduler actor's; it reads and changes that actor's state.

#include "actors/scheduler_state.hpp"
#include "actors/sequence_lifecycle.hpp"

#include <chrono>
#include <cstddef>

namespace kvlane::actors {

/// Whether the objectives ([scheduler.slo]) steer the mode's preemption and demotion: in
/// the MLFQ modes, unless the policy's `slo_gates_preemption` is off; recompute stays the
/// peer it models.
bool goodput_gated(const scheduler_state& st) noexcept;

/// Whether `s`, if evicted now, would drop its KV and recompute it rather than park it.
bool would_recompute(const scheduler_state& st, const sequence& s);

/// Plans slots for the `limit` best ranked sequences (0: all), at `now`.
///
/// The planner admits only its target set and otherwise looks at residents
/// (plan_target_size), so it is given the best of the rank index and then the
/// residents outside them in their rank order: O(slots log n), not a pass over
/// every live sequence.
void plan_round(scheduler_state& st, sequence_lifecycle& life, std::size_t limit,
                std::chrono::steady_clock::time_point now);

} // namespace kvlane::actors
