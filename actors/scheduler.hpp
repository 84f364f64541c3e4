#pragma once

// kvlane::actors::scheduler — one per model: decides which sequences hold the
// model's KV slots, builds every step, and moves KV between slots and the
// snapshot store.
//
// The decisions are pure units this actor feeds and carries out
// (docs/scheduling.md): `mlfq_policy` ranks sequences (skip-join MLFQ:
// classes, levels and quanta, clients round-robin, aging), `plan_slots`
// admits the top ranked into free or spare slots and picks victims (swap or
// recompute, by the cost model), `compose_step` builds each step. The actor
// owns the sequences, the slot table and the store handles, talks to the
// lanes, samples tokens and keeps the statistics.
//
// Modes (actors/policy: rules_of, place_transfers): fcfs (arrival order, no
// preemption), prio-fcfs (class then arrival, no preemption), recompute
// (class then arrival; preempts by dropping KV), sync (MLFQ, transfers on the
// compute lane between steps, 4x longer quanta below level 0), overlap
// (transfers on the transfer lane while steps run; falls back to sync's rule
// if the backend cannot overlap), free-transfer (as overlap; the engine zeroes
// the sim's transfer times).
//
// Threading: a CAF event-based actor; all state is its own. Blocking calls
// happen only in its two detached lanes.

#include "actors/fault_policy.hpp"
#include "actors/lane.hpp"
#include "actors/messages.hpp"
#include "actors/policy.hpp"
#include "actors/reuse_policy.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::actors {

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

/// Called on the scheduler's thread at every phase change; must not block.
/// For tests and tracing.
using scheduler_observer = std::function<void(std::string_view model, seq_id, seq_phase)>;

struct scheduler_setup {
  std::string model;
  std::uint32_t model_index = 0;
  std::shared_ptr<backends::backend> backend;
  std::shared_ptr<ipc::snapshot_store> store;
  actors::scheduler_policy policy;
  actors::reuse_policy reuse;
  scheduler_observer observer; ///< optional
  std::shared_ptr<lane_heartbeat> compute_heartbeat;  ///< required
  std::shared_ptr<lane_heartbeat> transfer_heartbeat; ///< required
};

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

using scheduler_stats_ptr = std::shared_ptr<const scheduler_stats>;

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
using sequence_list_ptr = std::shared_ptr<const std::vector<sequence_info>>;
using list_atom = caf::atom_constant<caf::atom("list")>;

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
  std::uint64_t bytes = 0;  ///< store bytes when stored, else the KV bytes in the slot
  double idle_ms = 0;       ///< since it was kept or last reused
  std::uint64_t hits = 0;   ///< requests it served
};
using retained_list_ptr = std::shared_ptr<const std::vector<retained_info>>;

/// The owner of a retained entry when reuse is widened to every user.
inline constexpr std::uint64_t shared_owner = ~std::uint64_t{0};

/// The owner of requests that come without a peer uid (the HTTP API): they
/// reuse each other's KV, never a local user's (uids are 32-bit).
inline constexpr std::uint64_t http_owner = std::uint64_t{1} << 32;

/// Replies with every retained entry of the model, by id.
using cache_list_atom = caf::atom_constant<caf::atom("cachels")>;

/// Which retained entries `kvlane cache drop` removes: those that every set
/// selector matches (none set: every entry of the model).
struct retained_drop_request {
  std::optional<std::uint64_t> id;
  /// Entries left by turns of this client session of `user`.
  struct session_selector {
    std::uint64_t user = 0;
    std::string name;
  };
  std::optional<session_selector> session;
};

/// What a drop freed. Slots of entries being dumped free when the dump ends
/// (their snapshot is freed then too): they count in `entries`, not in `slots`.
struct retained_drop_result {
  std::uint32_t entries = 0;
  std::uint32_t slots = 0;
  std::uint32_t snapshots = 0;
  std::uint64_t tokens = 0;
  std::uint64_t store_bytes = 0;
};

/// Drops retained entries (retained_drop_request); replies retained_drop_result.
using cache_drop_atom = caf::atom_constant<caf::atom("cachedrop")>;

/// Spawns the scheduler with its compute and transfer lanes (linked: they
/// stop with it).
caf::actor spawn_scheduler(caf::actor_system& sys, scheduler_setup setup);

/// Applies new policy knobs (quantum, levels, spare slots, step budget,
/// aging, EWMA weight) at the next planning round; the mode cannot change
/// live. Replies true.
using policy_atom = caf::atom_constant<caf::atom("policy")>;

/// Applies new reuse knobs (mode, scope, TTL, minimum prefix) from the next
/// event on; entries kept under the old knobs stay until used or evicted,
/// except that mode off drops them all. Replies true.
using reuse_atom = caf::atom_constant<caf::atom("reuse")>;

/// Sent by the engine before shutdown: ends every stream with reason
/// cancelled and `message`, frees every slot and snapshot, then replies.
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;

/// Test hook: the scheduler throws std::runtime_error(`message`) from its
/// handler, as a bug would, so that tests can exercise what a scheduler's
/// death does to its model (the engine's monitor, the sessions, the daemon).
using crash_atom = caf::atom_constant<caf::atom("crash")>;

} // namespace kvlane::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::scheduler_stats_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::sequence_list_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::retained_list_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::retained_drop_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::retained_drop_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::scheduler_policy)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::reuse_policy)
