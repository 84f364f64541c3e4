#pragma once

// kvlane::actors::engine_config — what the serving core needs to start: its
// models (each with its backend and store share), the scheduling policy and
// the snapshot store's size.
//
// Problem it solves: the engine must not depend on the daemon's config file
// format. The daemon's config (daemon/config.hpp) extends this type with its
// own sections; tools and tests build it directly.

#include "actors/keep_alive.hpp"
#include "actors/policy.hpp"
#include "actors/reuse_policy.hpp"
#include "backends/backend_config.hpp"
#include "backends/chat_format.hpp"
#include "ipc/snapshot_store.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kvlane::actors {

struct model_config {
  std::string name;
  backends::backend_config backend;    ///< `backend` and the backend's own table ([model.sim])
  /// The chat template the HTTP API's chat endpoints render messages with.
  backends::chat_format chat_format = backends::chat_format::chatml;
  std::uint64_t store_floor_bytes = 0; ///< snapshot store bytes reserved for this model
  std::uint64_t store_cap_bytes = 0;   ///< most snapshot store bytes it may use; 0 = no cap
  /// Idle time before it unloads when a request does not say ([[model]] keep_alive).
  keep_alive keep = keep_alive::after(std::chrono::minutes(5));
  /// Loaded when the daemon starts (else on first use).
  bool load_at_start = true;

  friend bool operator==(const model_config&, const model_config&) = default;
};

/// The snapshot store's disk tier ([store.disk]; docs/snapshot-store.md, "Disk tier").
struct store_disk_config {
  std::string dir;                            ///< where its files go; empty: no disk tier
  std::uint64_t max_bytes = 64ull << 30;      ///< most bytes of files it keeps
  std::uint64_t write_bytes_per_s = 256ull << 20; ///< write-back bandwidth bound

  friend bool operator==(const store_disk_config&, const store_disk_config&) = default;
};

struct store_config {
  std::uint64_t max_bytes = 8ull << 30; ///< snapshot store limit (reserved, committed on use)
  /// Freed store bytes kept committed for the next dumps (no page faults);
  /// beyond it freed ranges are returned to the OS. At most max_bytes.
  std::uint64_t warm_pool_bytes = 256ull << 20;
  /// Commit the warm pool at start-up, so the first dumps take no page fault
  /// either (its RAM is held from the start).
  bool prefault_warm_pool = false;
  /// How snapshots are ranked for eviction within a class (parked, retained):
  /// cost-aware (greedy-dual, the default) or least recently used.
  ipc::eviction_value eviction = ipc::eviction_value::cost;
  store_disk_config disk;

  friend bool operator==(const store_config&, const store_config&) = default;
};

/// [models]: how many models are resident, and how long a request waits for one.
struct lifecycle_config {
  std::uint32_t max_loaded = 0; ///< models loaded at once; 0 = no bound
  /// How long a request waits for its model to load (including waiting for
  /// room under max_loaded) before it fails.
  std::chrono::milliseconds load_timeout{std::chrono::minutes(5)};

  friend bool operator==(const lifecycle_config&, const lifecycle_config&) = default;
};

struct engine_config {
  std::vector<model_config> models;
  lifecycle_config lifecycle;
  scheduler_policy scheduler;
  reuse_policy reuse;
  store_config store;
};

} // namespace kvlane::actors
