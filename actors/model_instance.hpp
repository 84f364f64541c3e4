#pragma once

// kvlane::actors::model_instance — one configured model on its device: its
// backend, scheduler (which owns the model's two lanes), health and grammar
// caches; created when the model loads and stopped when it unloads.
//
// Problem it solves: a model no longer lives as long as the daemon (it loads
// on first use and unloads after its keep_alive, docs/architecture.md "Model
// lifecycle"), so creating and stopping one is its own unit, used the same way
// at start-up, on a load, on an unload and at shutdown. Stopping first moves
// the retained KV still warm in slots to the snapshot store (flush_warm), so
// it survives the unload sealed and labelled under the model's fingerprint;
// the next load claims it back (snapshot_store::claim, kv_keeper::adopt_restored).
//
// Threading: load_model_instance and stop_model_instance block (a backend
// loads for seconds; the stop waits for the scheduler's replies): call them on
// the engine's owner thread or the model registry's worker, never on an actor.
// A model_entry is immutable once built; holders share it by shared_ptr.
//
// Devices: an instance_context holds the engine's device_registry, so every
// model loaded through it whose device (backends::device_of) has the same
// name gets the same shared_device, and its lanes take turns with theirs
// (docs/architecture.md, "Models sharing a device").

#include "actors/engine_config.hpp"
#include "actors/device_gate.hpp"
#include "actors/engine_monitor.hpp"
#include "actors/grammar_vocabulary.hpp"
#include "actors/model_health.hpp"
#include "actors/scheduler.hpp"
#include "backends/factory.hpp"
#include "common/expected.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kvlane::actors {

struct model_entry {
  std::string name;
  std::uint32_t index = 0;
  backends::backend_info info;
  std::shared_ptr<backends::backend> backend;
  caf::actor scheduler;
  caf::actor monitor; ///< engine_monitor watching this instance's scheduler
  std::shared_ptr<lane_heartbeat> compute_heartbeat;
  std::shared_ptr<lane_heartbeat> transfer_heartbeat;
  /// The device it runs on, with the gates its lanes pass (shared with every
  /// loaded model on the same device).
  std::shared_ptr<shared_device> device;
  std::shared_ptr<model_health> health; ///< failed or serving, and the latest figures
  /// What its scheduler last published for refusals at the door (actors/door_forecast).
  std::shared_ptr<door_board> door;
  /// Its grammar vocabulary (built on the first constrained request) and mask caches.
  std::shared_ptr<model_grammar> grammar;
  std::chrono::milliseconds load_time{0}; ///< how long loading it took
  /// Bytes of its weights file (a GGUF), 0 when the backend has none (the sim) or its
  /// size is unknown: with its KV slots, what /api/ps reports as its size.
  std::uint64_t weights_bytes = 0;
};

/// What loading any model needs besides its own config.
struct instance_context {
  caf::actor_system* sys = nullptr;
  std::shared_ptr<ipc::snapshot_store> store;
  scheduler_observer observer;
  failure_hook on_failure;
  std::chrono::milliseconds stats_refresh{100};
  std::filesystem::path hash_cache; ///< model files' content hashes (actors/model_fingerprint)
  bool free_transfers = false;      ///< scheduler mode free-transfer: sim transfer times zeroed
  /// The devices of the engine's models: one per engine, shared by every load.
  std::shared_ptr<device_registry> devices = std::make_shared<device_registry>();
  /// Creates a model's backend (a seam for tests that wrap the backend).
  std::function<expected<std::unique_ptr<backends::backend>, backends::backend_error>(
    std::string, const backends::backend_config&)>
    make_backend = backends::make_backend;
};

/// Creates model `index` of `cfg` (its backend, fingerprint, scheduler and
/// monitor) and gives its scheduler the retained KV the store holds for it
/// under an equal fingerprint. The model must be registered with the store.
expected<std::shared_ptr<model_entry>, std::string>
load_model_instance(const instance_context& ctx, const engine_config& cfg, std::uint32_t index);

/// Stops `m`: its monitor first (so the stop is no failure), then its warm
/// retained KV goes to the store, then every stream ends (reason cancelled,
/// `why`) and the scheduler and lanes stop. With `wait`, returns once the
/// scheduler has terminated (its lanes with it), so the device is free.
void stop_model_instance(caf::actor_system& sys, const model_entry& m, std::string_view why,
                         bool wait);

} // namespace kvlane::actors
