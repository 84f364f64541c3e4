#pragma once

// kvlane::actors::plan_candidates — the slot planner's view of the ranked sequences.
//
// Problem it solves: the planner (actors/slot_planner) decides on values, not on sequences: each
// one's state, slot and class, and for residents and waiting ones the figures a preemption is
// decided on (actors/preemption_figures: eviction cost, expected end, slack, service time).
// This turns the scheduler's sequences into those values at one instant, so the scheduler only
// gathers the ranked list and hands the result to the planner.
//
// Pure given its inputs (the instant is a parameter). Threading: the scheduler's thread.

#include "actors/demotion_queue.hpp"
#include "actors/preemption_figures.hpp"
#include "actors/slot_planner.hpp"
#include "actors/step_composer.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace kvlane::actors {

struct sequence;
class sequence_table;

struct candidate_inputs {
  /// A snapshot's size for this many positions (the backend's snapshot_size).
  std::function<std::uint64_t(std::uint32_t kv_len)> snapshot_size;
  /// Whether an eviction of this resident would recompute rather than swap (the cost model).
  std::function<bool(const sequence&)> recompute_cheaper;
};

/// One sequence's candidate at `now`.
slot_candidate plan_candidate(const sequence& s, const preemption_figures& figures,
                              const candidate_inputs& in,
                              std::chrono::steady_clock::time_point now);

/// The candidates of `order` (ranked, best first) at `now`, in the same order.
std::vector<slot_candidate> plan_candidates(std::span<sequence* const> order,
                                            const preemption_figures& figures,
                                            const candidate_inputs& in,
                                            std::chrono::steady_clock::time_point now);

/// Goodput: once `costs` has measured steps, `limits` gets the step's cost
/// figures and each decoding row of `rows` its step allowance at `now`: how
/// long each of its next steps may take and meet its TPOT objective
/// (actors/step_composer paces batch prefill by them). Nothing before.
void pace_by_tpot(std::span<step_candidate> rows, step_limits& limits,
                  const sequence_table& table, const cost_model& costs,
                  const output_lengths& outputs, const slo_targets& slo,
                  std::uint32_t prefill_chunk, bool serialized,
                  std::chrono::steady_clock::time_point now);

/// Goodput: each sequence of `table` before its first token whose check is
/// due at `now` is demoted if its slack (from its candidate) is gone, and
/// otherwise watched again for when it would be (actors/demotion_queue).
/// O(log n) per sequence checked, nothing else. Returns how many it demoted.
std::uint64_t demote_hopeless(sequence_table& table, const preemption_figures& figures,
                              const candidate_inputs& in, const slo_targets& slo,
                              std::chrono::steady_clock::time_point now);

} // namespace kvlane::actors
