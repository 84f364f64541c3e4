#pragma once

// kvlane::actors::scheduler_report — what a model's scheduler reports: its
// statistics (`kvlane status`, the metrics, the bench), its live sequences
// (`kvlane ps`) and its retained entries (`kvlane cache ls`).
//
// Problem it solves: the figures are read from the scheduler's tables (the
// sequences, the KV keeper, the cost model, the fault policy) by the actor on
// its own thread; this unit assembles them so that the actor only passes its
// tables. The statistics read counts kept per change and a pass over the
// retained entries; the listings read every entry: they are admin requests,
// not on the event path.
//
// Pure: values in, values out; `now` is passed in. Threading: the scheduler's.

#include "actors/constrained_decoding.hpp"
#include "actors/cost_model.hpp"
#include "actors/fault_policy.hpp"
#include "actors/messages.hpp"
#include "actors/policy.hpp"
#include "actors/slot_planner.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

class kv_keeper;
class sequence_table;
struct retained_entry;

/// Where a sequence's KV is, as reported to an observer at every change.
enum class seq_phase : std::uint8_t {
  queued,    ///< no KV: new, or dropped to be recomputed
  resident,  ///< holds a slot (prefilling or decoding)
  dumping,   ///< its slot is being copied to the store
  parked,    ///< its KV lives in the store
  loading,   ///< its snapshot is being copied back into a slot
  ended,     ///< the stream ended; nothing of it remains
};
std::string_view to_string(seq_phase p) noexcept;

/// The phase an observer sees for a sequence whose KV is in `s`.
seq_phase phase_of(kv_state s) noexcept;

/// Counters and gauges of one model's scheduler.
struct scheduler_stats {
  std::string model;
  actors::scheduler_mode mode = actors::scheduler_mode::overlap;
  std::uint32_t slots = 0;
  std::uint32_t slots_busy = 0; ///< resident, loading or dumping
  /// Sequences by where their KV is (seq_phase), ended ones aside.
  std::uint32_t queued = 0, resident = 0, dumping = 0, parked = 0, loading = 0;
  /// Sequences that hold no slot (queued or parked), by priority class.
  std::uint32_t without_slot_interactive = 0, without_slot_batch = 0;
  std::uint64_t submitted = 0, finished = 0, cancelled = 0, failed = 0;
  std::uint64_t steps = 0, tokens_generated = 0, prefill_tokens = 0;
  std::uint64_t preemptions = 0, swaps = 0, recomputes = 0;
  /// Sequences ranked down because they could no longer meet their TTFT
  /// objective (docs/scheduling.md "Goodput").
  std::uint64_t demoted = 0;
  /// Requests refused at the door ([scheduler.slo] refuse_over, actors/door_forecast).
  std::uint64_t refused = 0;
  std::uint64_t dumps = 0, loads = 0, snapshots_lost = 0;
  std::uint64_t step_failures = 0, dump_failures = 0, load_failures = 0;
  /// Step faults (actors/fault_policy, docs/scheduling.md "Failures").
  device_health device = device_health::healthy;
  double device_backoff_ms = 0;    ///< the current wait while failing, else 0
  fault_counters faults;           ///< retries, isolated rows, row faults, backoffs
  double step_busy_ms = 0;     ///< compute lane busy in steps
  double transfer_ms = 0;      ///< transfer time in total
  double dump_ms_total = 0, load_ms_total = 0;
  double transfer_hidden_ms = 0; ///< transfer time during which a step ran
  mask_figures masks; ///< token masks of constrained sequences (actors/constrained_decoding)
  double step_base_ms = 0, step_per_token_ms = 0; ///< cost model (0 = not yet known)
  double dump_ms = 0, load_ms = 0; ///< cost model for one full snapshot (0 = not yet known)
  bool failed_model = false; ///< set by the engine: the scheduler stopped (figures are its last)
  std::string failure;       ///< why, when failed_model
  /// Conversation reuse (docs/scheduling.md, "Conversations").
  std::uint32_t retained = 0, retained_warm = 0; ///< entries kept; of which warm in a slot
  std::uint64_t reuse_hits = 0;       ///< sequences that started from retained KV
  std::uint64_t reuse_warm_hits = 0;  ///< of which from a warm slot (the rest loaded a snapshot)
  std::uint64_t reused_tokens = 0;    ///< prompt tokens they did not prefill
  std::uint64_t reuse_recomputed = 0; ///< matches the cost model chose to prefill instead of load
  std::uint64_t retained_dumps = 0;   ///< warm entries dumped to the store to free their slot
  std::uint64_t retained_dropped = 0; ///< warm entries dropped to free their slot at once
  std::uint64_t retained_lost = 0;    ///< stored entries evicted by the store or lost
  std::uint64_t retained_expired = 0; ///< entries dropped by the idle TTL
  std::uint64_t retained_superseded = 0; ///< entries replaced by a longer one of the same scope
  std::uint64_t retained_admin_dropped = 0; ///< entries dropped by `kvlane cache drop`
  std::uint32_t retained_stored = 0;       ///< entries whose copy is sealed in the store
  std::uint64_t retained_warm_bytes = 0;   ///< KV bytes the warm entries cover in their slots
  std::uint64_t retained_store_bytes = 0;  ///< store bytes charged to the stored entries
};

/// One live sequence, for `kvlane ps`.
struct sequence_info {
  seq_id id = 0;
  std::string client;
  std::string model;
  priority_class priority = priority_class::interactive;
  seq_phase phase = seq_phase::queued;
  std::uint32_t tokens_in = 0;  ///< prompt tokens
  std::uint32_t tokens_out = 0; ///< generated so far
  std::uint32_t level = 0;      ///< MLFQ level
  std::uint32_t preemptions = 0;
  std::int32_t slot = -1;       ///< the KV slot it holds, -1 if none
  double age_ms = 0;            ///< since the scheduler received it
};
/// One retained entry (a finished request's KV kept for reuse), for
/// `kvlane cache ls`.
struct retained_info {
  std::uint64_t id = 0;    ///< unique within its model
  std::string model;
  std::uint64_t owner = 0; ///< peer uid allowed to reuse it; shared_owner when reuse is widened
  std::string session;     ///< conversation name, empty if none
  std::uint32_t tokens = 0; ///< positions the KV covers
  std::int32_t slot = -1;   ///< warm in this slot, -1 if not
  bool stored = false;      ///< a sealed copy is in the store
  bool dumping = false;     ///< the warm copy is being copied to the store
  std::string tier;         ///< stored: "memory", "disk" or "both"; empty when not stored
  std::uint64_t bytes = 0;  ///< store bytes when stored, else the KV bytes in the slot
  double idle_ms = 0;       ///< since it was kept or last reused
  std::uint64_t hits = 0;   ///< requests it served
};
/// The statistics: `counters` (the scheduler's own, with its model and mode)
/// completed with the gauges of its tables and the keeper's counters.
scheduler_stats report_stats(const scheduler_stats& counters, const backends::backend_info& info,
                             const sequence_table& seqs, const cost_model& costs,
                             const fault_policy& faults, const kv_keeper& keeper,
                             std::chrono::steady_clock::time_point now);

/// Every live sequence that is not cancelled, by id.
std::vector<sequence_info> list_sequences(const sequence_table& seqs, std::string_view model,
                                          std::chrono::steady_clock::time_point now);

/// Every retained entry, by id.
std::vector<retained_info> list_retained(const kv_keeper& keeper, std::string_view model,
                                         std::chrono::steady_clock::time_point now);

retained_info describe_retained(const retained_entry& e, const kv_keeper& keeper,
                                std::string_view model, std::chrono::steady_clock::time_point now);

} // namespace kvlane::actors
