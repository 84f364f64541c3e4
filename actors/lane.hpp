#pragma once

// kvlane::actors::lane — a detached actor that makes blocking backend calls.
//
// Each model has two: the compute lane (the only caller of backend.step) and
// the transfer lane (the only caller of backend.dump/load). In `sync` mode the
// scheduler sends transfers to the compute lane too, so they run between steps
// as the vendor API forces today. A lane runs one call at a time in its own
// thread, measures it, and replies; it never touches scheduler state.
// Transfers move bytes straight between the slot and snapshot-store pages.
//
// Models on the same device share its engines (actors/device_gate): a lane
// passes its device gate (the compute lane the device's compute gate, the
// transfer lane its transfer gate) around every backend call. The call is
// measured, and marked busy for the watchdog, only once the gate is held, so
// the scheduler's step and transfer costs stay the device's own; the wait is
// counted in the lane's heartbeat.

#include "actors/device_gate.hpp"
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

/// What a lane shows other threads. `busy_since_ns`: when its current backend
/// call started (steady clock, ns since its epoch), 0 while idle or waiting for
/// its device. Read by the watchdog: a call that never returns (a hung NPU)
/// must stop the systemd watchdog pings. `device_wait`: its passes through its
/// device gate and the time it waited for them (status, metrics).
struct lane_heartbeat {
  std::atomic<std::int64_t> busy_since_ns{0};
  gate_account device_wait;
};

/// Spawns a detached lane over `backend` and `store` (both shared with the
/// other lane of the model) that passes `gate` (one of its device's gates,
/// kept alive by the pointer) around every backend call.
lane_actor spawn_lane(caf::actor_system& sys, std::string name,
                      std::shared_ptr<backends::backend> backend,
                      std::shared_ptr<ipc::snapshot_store> store,
                      std::shared_ptr<lane_heartbeat> heartbeat,
                      std::shared_ptr<device_gate> gate);

} // namespace kvlane::actors
