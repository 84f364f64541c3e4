#pragma once

// kvlane::actors::scheduler_state — what one model's scheduler actor holds between events:
// its lanes, the sequences and their slots, the store's share (kv_keeper), transfers in flight,
// the policy's knobs, the cost model and the counters. The units that decide (sequence_table,
// slot_planner, step_composer, sequence_lifecycle, kv_keeper, fault_policy, ...) work on its
// parts; actors/scheduler.cpp carries their decisions out. Only scheduler.cpp and its
// planning round (actors/planning_round) include it.
//
// Threading: the scheduler actor's own state; touched from its handlers only.

#include "actors/cost_model.hpp"
#include "actors/door_forecast.hpp"
#include "actors/fault_policy.hpp"
#include "actors/kv_keeper.hpp"
#include "actors/lane.hpp"
#include "actors/mlfq_policy.hpp"
#include "actors/output_lengths.hpp"
#include "actors/overlap_meter.hpp"
#include "actors/policy.hpp"
#include "actors/scheduler.hpp"
#include "actors/sequence_table.hpp"
#include "actors/slo.hpp"
#include "actors/transfer_tracker.hpp"
#include "common/logging.hpp"

#include <caf/response_promise.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace kvlane::actors {

struct scheduler_state {
  static inline const char* name = "scheduler";

  scheduler_setup setup;
  backends::backend_info info;
  std::shared_ptr<spdlog::logger> log;
  lane_actor compute;
  lane_actor transfer;
  scheduler_mode mode = scheduler_mode::overlap;
  actors::mode_rules rules; ///< what the mode decides (actors/policy)
  bool serialized = false; ///< transfers share the compute lane (sync, or no overlap)
  bool fallback = false;   ///< overlap mode on a backend that cannot overlap
  mlfq_policy mlfq;
  sequence_table seqs;           ///< the live sequences, their slots and rank order
  std::optional<kv_keeper> kv;   ///< retained entries and parked snapshots (set at start)
  transfer_tracker transfers;    ///< dumps and loads in flight
  std::uint32_t max_step_tokens = 0;
  bool batch_prefill_yields = false;
  std::uint32_t spare = 0; ///< slots kept spare: [scheduler] spare_slots; none when serialized or
                           ///< in a mode that keeps none (mode_rules::keeps_spare)
  slo_targets slo; ///< [scheduler.slo]: what a preemption must save
  bool slo_gates = true;
  std::array<double, 2> door_limits{}; ///< per class: refused beyond this predicted start (0: never)
  grant_meter grants;                  ///< how fast slots go to waiting sequences, for the door

  std::uint64_t step_number = 0;
  bool step_in_flight = false;
  std::chrono::steady_clock::time_point step_started;
  /// The masks computed while the step in flight runs: how many, and when the last was done.
  std::uint32_t step_masks = 0;
  std::chrono::steady_clock::time_point step_masks_done;
  cost_model costs;
  output_lengths outputs; ///< finished lengths, for how long a resident runs on
  scheduler_stats stats;
  bool shutting_down = false;
  std::optional<caf::response_promise> flushed; ///< flush_warm_atom: replied when no entry is warm
  bool replan_queued = false; ///< a replan_atom is in the mailbox
  bool plan_stale = false;    ///< submits arrived since the last plan

  overlap_meter overlap; ///< how much transfer time the steps hid

  fault_policy faults;            ///< what failed steps lead to (actors/fault_policy)
  bool probe_timer_armed = false; ///< a probe_atom is on its way
  std::string last_step_error;    ///< the backend's message for the last failed step

  std::uint64_t expiry_ticket = 0; ///< the armed expiry timer's; older ones are stale
};

} // namespace kvlane::actors
