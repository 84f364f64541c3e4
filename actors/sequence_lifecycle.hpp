#pragma once

// kvlane::actors::sequence_lifecycle — what each scheduling event does to a
// sequence: admitted (prefill, warm reuse, or a load), evicted (a swap, or
// its KV dropped), parked, restored, retained, stopped, cancelled, failed
// for a fault, ended; and what a lane's reply does to it.
//
// Problem it solves: the scheduler's events (a cancel, a consumer's stop, a
// transfer's end, a fault verdict, a shutdown, the planner's admissions and
// evictions) each change a sequence's KV location and stream in several
// tables at once — the sequence table, the KV keeper, the transfer tracker,
// the statistics — and a sequence a lane works on can only end when the lane
// replies. This unit is that event → decision loop, apart from the actor:
// the tables in, the changes made, and what must leave the process
// (transfers to a lane, a stream's end, a phase change) handed to a
// `lifecycle_port` the actor implements.
//
// No actor system and no clock: times are passed in. Threading: the
// scheduler's; it holds references to the scheduler's tables and port.

#include "actors/cost_model.hpp"
#include "actors/fault_policy.hpp"
#include "actors/kv_keeper.hpp"
#include "actors/messages.hpp"
#include "actors/mlfq_policy.hpp"
#include "actors/scheduler_report.hpp"
#include "actors/sequence_table.hpp"
#include "actors/slot_planner.hpp"
#include "actors/step_composer.hpp"
#include "actors/transfer_tracker.hpp"

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

/// What the lifecycle needs done outside the process's tables.
class lifecycle_port {
public:
  virtual ~lifecycle_port() = default;
  /// Sends `job` to the lane (and counts it in flight).
  virtual void send_transfer(transfer_job_ptr job) = 0;
  /// Delivers the end of `s`'s stream to its consumer, once.
  virtual void end_stream(sequence& s, stream_end end) = 0;
  /// `s` entered `phase` (the observer).
  virtual void phase_changed(const sequence& s, seq_phase phase) = 0;
  /// `s` ended with `reason` (counted by the actor), just before it is erased.
  virtual void ended(const sequence& s, end_reason reason) = 0;
  /// A retained entry was kept: the idle-expiry timer may need arming.
  virtual void retained_kept() = 0;
};

/// The scheduler's tables the lifecycle reads and changes.
struct lifecycle_tables {
  sequence_table& seqs;
  kv_keeper& kv;
  transfer_tracker& transfers;
  mlfq_policy& mlfq;
  cost_model& costs;
  fault_policy& faults;
  scheduler_stats& stats;
  std::string& last_step_error; ///< the backend's message for the last failed step
  const bool& shutting_down;    ///< no KV is retained, nothing is admitted
};

class sequence_lifecycle {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// `model` names the model in log lines.
  sequence_lifecycle(lifecycle_tables tables, lifecycle_port& port, spdlog::logger& log,
                     std::string_view model) noexcept
    : t_(tables), port_(port), log_(log), model_(model) {}

  // -- events ------------------------------------------------------------------------

  /// A cancel: queued and parked sequences end at once, one a lane works on
  /// when the lane replies.
  void cancel(seq_id id, std::string_view why, time_point now);
  /// The consumer matched a stop string after `generated` tokens: ends as a
  /// stop token would, keeping the KV of the prompt and `keep` tokens. True
  /// when it ended now (a lane working on it: when the lane replies).
  bool stop(seq_id id, std::uint32_t generated, std::uint32_t keep, time_point now);
  /// A lane replied for a transfer. `hidden_ms`: how much of it a step hid.
  /// False when nothing changed that a plan could use.
  bool transfer_ended(const transfer_done& done, double hidden_ms, time_point now);
  /// A step succeeded: the fault policy's verdict (call before its rows are
  /// processed, so that a row that ends does not end an isolation round as if
  /// it had not run).
  fault_actions step_succeeded(std::span<const seq_id> rows, time_point now);
  /// A step failed: its rows can run again; marked rows end now.
  void step_failed(const step_plan& plan, const backends::backend_error& error, time_point now);
  /// The fault policy's verdict: recompute rows, fail sequences.
  void apply_fault_actions(const fault_actions& actions, time_point now);
  /// Every stream ends with reason cancelled and `why`; slots and snapshots
  /// are freed except those a lane still works on (freed when it replies).
  void shutdown(const std::string& why);

  /// Removes the retained entries an admin selected (kvlane cache drop).
  retained_drop_result drop_retained(const retained_drop_request& req);

  // -- steps ---------------------------------------------------------------------------

  /// The residents that may contribute a row to the next step: every one not
  /// in a step, or only the rows `next` retries or isolates.
  std::vector<step_candidate> step_candidates(const next_step& next) const;
  /// The step of `rows`: its sequences enter it (in_step), its tokens copied.
  step_plan_ptr start_step(const std::vector<step_row_plan>& rows, std::uint64_t number);
  /// While the device is failing, nothing resident or loading and no wait
  /// pending: the best-ranked waiting sequence must be admitted as the probe.
  bool probe_needs_a_sequence(bool step_in_flight, time_point now) const;

  // -- a step's rows (the actor samples) ---------------------------------------------

  /// Charges a step `s` ran in; it may drop a level and take a new turn.
  void charge_step(sequence& s);
  /// A request that ended normally leaves its KV warm in its slot (unless
  /// reuse is off or the daemon is stopping).
  void retain_or_release(sequence& s, time_point now);
  /// Ends `s`: its stream, the observer, the tables. `s` dies here.
  void finish(sequence& s, end_reason reason, std::string message, time_point now);
  /// Ends a sequence marked while a lane worked on it, now that none does.
  void end_marked(sequence& s, time_point now);
  /// No longer planned; completed when the lane working on it replies.
  void mark_cancelled(sequence& s);

  // -- the planner's decisions -------------------------------------------------------

  /// Queued sequences whose prefix sits warm in a slot take that slot
  /// (the best `limit` only; 0: all).
  void take_warm_hits(std::size_t limit, time_point now);
  /// Reclaims warm slots for the target sequences without a slot (among the
  /// first `target` of `order`) and `spare` spare slots.
  void reclaim_warm(const std::vector<sequence*>& order, std::size_t target, std::uint32_t spare);
  /// Slots no one holds and no retained KV sits warm in.
  std::uint32_t free_slots() const;
  /// Gives `slot` to a queued or parked sequence.
  void admit(sequence& s, slot_id slot, time_point now);
  /// Evicts a resident: a swap (the store may refuse it: then a recompute),
  /// or its KV dropped.
  void evict(sequence& s, eviction how);

private:
  void set_state(sequence& s, kv_state state);
  void drop_kv(sequence& s);
  void stop_now(sequence& s, std::uint32_t generated, std::uint32_t keep, time_point now);
  void start_warm(sequence& s, slot_id slot, std::uint32_t length);
  bool reuse_retained(sequence& s, time_point now);
  void carry_out(kv_jobs jobs);
  void drop_lost(const std::vector<seq_id>& lost);
  void fail_for_fault(seq_id id, std::string message, time_point now);
  void note_health(device_health before);
  static std::uint8_t snapshot_priority(const sequence& s) noexcept;

  lifecycle_tables t_;
  lifecycle_port& port_;
  spdlog::logger& log_;
  std::string_view model_;
};

} // namespace kvlane::actors
