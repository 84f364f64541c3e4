#pragma once

// kvlane::actors::store_restart — opens the snapshot store, either fresh or
// on the arena and index an earlier daemon left in systemd's file-descriptor
// store.
//
// Problem it solves: a restart used to lose every retained conversation's KV.
// The arena memfd and the index memfd outlive the process in systemd's fd
// store; the next start gets them back (daemon/fd_store) and hands them here.
// The arena is mapped in place (no copy); the index is read and validated,
// and marked open before anything else happens, so a crash from here on
// leaves an index the next start refuses. What the index lists becomes
// pending in the store until each model claims its snapshots under its
// fingerprint (snapshot_store::claim); anything unusable is discarded and
// counted by reason.
//
// Threading: start-up only, on the engine's creating thread.

#include "actors/engine_config.hpp"
#include "ipc/snapshot_store.hpp"

#include <filesystem>
#include <memory>
#include <string>

namespace kvlane::actors {

/// The descriptors an earlier daemon parked in systemd's fd store, taken
/// back at start (-1: none). open_store owns them from the call on.
struct store_handoff {
  int arena_fd = -1;
  int index_fd = -1;
  /// Where model files' content hashes are cached (actors/model_fingerprint);
  /// empty: computed at every start.
  std::filesystem::path hash_cache;
};

struct store_opening {
  std::unique_ptr<ipc::snapshot_store> store;
  bool arena_inherited = false; ///< the arena is the earlier daemon's, mapped in place
  ipc::recovery_result recovered; ///< what its index listed (pending until claimed)
  std::string note;             ///< what happened to the inherited descriptors, for the log
};

/// Builds the store over an inherited arena when one is handed over and it
/// has the configured size (else over a new one), with an index file
/// attached (the inherited one, else a new one).
expected<store_opening, std::string> open_store(const store_config& cfg,
                                                const ipc::store_options& options,
                                                store_handoff handoff);

} // namespace kvlane::actors
