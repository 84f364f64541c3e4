#pragma once

// kvlane::actors::lane — a detached actor that makes blocking backend calls.
//
// Each model has two: the compute lane (the only caller of backend.step) and
// the transfer lane (the only caller of backend.dump/load). In `sync` mode the
// scheduler sends transfers to the compute lane too, so they run between steps
// as the vendor API forces today. A lane runs one call at a time in its own
// thread, measures it, and replies; it never touches scheduler state.
// Transfers move bytes straight between the slot and snapshot-store pages.

#include "actors/messages.hpp"

#include <caf/typed_actor.hpp>
#include <caf/replies_to.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

namespace kvlane::actors {

using lane_actor = caf::typed_actor<
  caf::replies_to<step_atom, step_plan_ptr>::with<step_done_ptr>,
  caf::replies_to<transfer_atom, transfer_job_ptr>::with<transfer_done_ptr>>;

/// When the lane's current backend call started (steady clock, ns since its
/// epoch), 0 while idle. Read by the watchdog: a call that never returns (a
/// hung NPU) must stop the systemd watchdog pings.
struct lane_heartbeat {
  std::atomic<std::int64_t> busy_since_ns{0};
};

/// Spawns a detached lane over `backend` and `store` (both shared with the
/// other lane of the model).
lane_actor spawn_lane(caf::actor_system& sys, std::string name,
                      std::shared_ptr<backends::backend> backend,
                      std::shared_ptr<ipc::snapshot_store> store,
                      std::shared_ptr<lane_heartbeat> heartbeat);

} // namespace kvlane::actors
