#pragma once

// kvlane::actors::scheduler — one per model: decides which sequences hold the
// model's KV slots, builds every step, and moves KV between slots and the
// snapshot store.
//
// The decisions are pure units this actor feeds and carries out
// (docs/scheduling.md): `mlfq_policy` ranks sequences (skip-join MLFQ:
// classes, levels and quanta, clients round-robin, aging), `plan_slots`
// admits the top ranked into free or spare slots and picks victims (swap or
// recompute, by the cost model), `compose_step` builds each step,
// `kv_keeper` owns every snapshot and retained entry, `transfer_tracker`
// counts the transfers in flight, `sequence_table` holds the live sequences
// and `scheduler_report` assembles the statistics and listings. The actor
// keeps the mailbox and the timers, sends steps and transfers to the lanes,
// samples tokens and carries out what the units decide.
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
#include "actors/kv_keeper.hpp"
#include "actors/lane.hpp"
#include "actors/messages.hpp"
#include "actors/policy.hpp"
#include "actors/reuse_policy.hpp"
#include "actors/scheduler_report.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::actors {

/// Called on the scheduler's thread at every phase change; must not block.
/// For tests and tracing.
using scheduler_observer = std::function<void(std::string_view model, seq_id, seq_phase)>;

class door_board; // actors/door_forecast

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
  std::shared_ptr<shared_device> device; ///< required: the gates its lanes pass (actors/device_gate)
  /// Optional: where it publishes, after each planning round, what submit()
  /// refuses a request at the door on (actors/door_forecast).
  std::shared_ptr<door_board> door;
};

using scheduler_stats_ptr = std::shared_ptr<const scheduler_stats>;
using sequence_list_ptr = std::shared_ptr<const std::vector<sequence_info>>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using retained_list_ptr = std::shared_ptr<const std::vector<retained_info>>;

/// Replies with every retained entry of the model, by id.
using cache_list_atom = caf::atom_constant<caf::atom("cachels")>;

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

/// The daemon is about to stop: dumps every warm retained entry into the
/// store (one at a time, while the transfer lane is idle), so the store's
/// index keeps it across a restart. Replies true once none is left warm.
using flush_warm_atom = caf::atom_constant<caf::atom("flushwarm")>;

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
