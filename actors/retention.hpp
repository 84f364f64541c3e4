#pragma once

// kvlane::actors::retention — where each finished conversation's KV is kept,
// and which one a new prompt can reuse.
//
// Problem it solves: a request's KV outlives the request. When it ends, its
// KV (prompt + generated tokens) stays warm in its slot; when the slot is
// needed the scheduler dumps it into the snapshot store (or drops it); the
// store may evict it later. A new prompt of the same scope that starts with
// retained tokens takes the warm slot or loads the snapshot, rolls back to the
// matched length and prefills only the rest. This table is the bookkeeping of
// that life cycle — values in, decisions out, no actors, no I/O: the
// scheduler performs every transfer and store call and reports back.
//
// An entry lives while it has a copy somewhere: warm in a slot, being dumped,
// or sealed in the store. A warm copy is consumed when a new sequence takes
// its slot (the slot's positions past the match get overwritten); a stored
// copy is never consumed by reuse (branches of a conversation, a shared
// system prompt) and goes only by eviction, TTL, an explicit drop, or
// because a newer entry of the same scope starts with all of its tokens
// (that one serves every prompt the older one could).
//
// Threading: none; owned and used by one scheduler.

#include "actors/prefix_index.hpp"
#include "ipc/snapshot_store.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlane::actors {

using retained_id = prefix_entry_id;

/// Who left a retained entry: the requesting user (whatever the reuse scope)
/// and the client session (conversation name) the request was a turn of.
struct retained_origin {
  std::uint64_t user = 0;
  std::string session; ///< empty: a stateless request
};

struct retained_entry {
  retained_id id = 0;
  prefix_scope scope;
  retained_origin origin;
  std::uint32_t kv_len = 0;             ///< positions the KV covers
  std::optional<backends::slot_id> slot; ///< warm copy
  std::optional<ipc::snapshot_handle> snapshot; ///< sealed copy in the store
  bool dumping = false;                 ///< the warm copy is being dumped
  std::uint64_t hits = 0;
  std::chrono::steady_clock::time_point last_use;
};

/// A reusable prefix for a new prompt.
struct retained_match {
  retained_id entry = 0;
  std::uint32_t length = 0; ///< tokens the new sequence need not prefill
  std::optional<backends::slot_id> slot;         ///< take this warm slot
  std::optional<ipc::snapshot_handle> snapshot;  ///< or load this snapshot
  std::uint32_t snapshot_len = 0;                ///< cache_len the snapshot was dumped with
};

/// What retain() made redundant: entries whose tokens are all a prefix of
/// the new one. The caller frees their snapshots and reclaims their slots.
struct superseded {
  retained_id id = 0;
  std::optional<backends::slot_id> slot;
  std::optional<ipc::snapshot_handle> snapshot;
  bool dumping = false; ///< the caller frees the snapshot when the dump ends
};

class retention {
public:
  /// `block_tokens`: the prefix index's block; `min_prefix`: entries shorter
  /// than this are not kept and matches shorter than this are not reported.
  retention(std::uint32_t block_tokens, std::uint32_t min_prefix);

  void set_min_prefix(std::uint32_t tokens) noexcept;
  std::uint32_t min_prefix() const noexcept { return min_prefix_; }

  /// Keeps `tokens` (exactly the KV's positions) warm in `slot`. Nothing is
  /// kept (nullopt) when shorter than the minimum. `dropped` receives the
  /// entries the new one supersedes (already removed from the table).
  std::optional<retained_id> retain(prefix_scope scope, std::span<const backends::token_id> tokens,
                                    backends::slot_id slot, retained_origin origin,
                                    std::chrono::steady_clock::time_point now,
                                    std::vector<superseded>& dropped);

  /// Keeps `tokens` as an entry with only a stored copy (a snapshot taken
  /// back after a restart). Same rules as retain(): nothing below the
  /// minimum, and entries it supersedes go to `dropped`.
  std::optional<retained_id> adopt(prefix_scope scope, std::span<const backends::token_id> tokens,
                                   ipc::snapshot_handle snapshot, retained_origin origin,
                                   std::chrono::steady_clock::time_point now,
                                   std::vector<superseded>& dropped);

  /// The longest reusable prefix of `prompt` in `scope`, at most max_length
  /// tokens, at least the minimum.
  std::optional<retained_match> match(prefix_scope scope, std::span<const backends::token_id> prompt,
                                      std::uint32_t max_length) const;

  /// Records that `id` served a request: counts a hit, refreshes its last use.
  void use(retained_id id, std::chrono::steady_clock::time_point now);

  /// The warm copy of `id` is gone (its slot was taken or reclaimed). The
  /// entry goes too unless it has a stored copy or a dump in flight.
  void slot_released(retained_id id);

  /// A dump of the warm copy began; the slot stays the entry's until it ends.
  void dump_started(retained_id id);
  /// The dump ended: the slot is free again; on success the entry has a
  /// stored copy. Returns false when the entry no longer exists (superseded or
  /// dropped meanwhile): the caller frees the snapshot.
  bool dump_finished(retained_id id, std::optional<ipc::snapshot_handle> snapshot);

  /// The stored copy was evicted or lost. The entry goes unless it is warm.
  void snapshot_lost(retained_id id);

  /// Removes an entry entirely (admin drop, TTL). Returns it so the caller
  /// can free what it held.
  std::optional<retained_entry> erase(retained_id id);

  /// The least recently used warm entry whose slot is not being dumped
  /// (ties: the lower id).
  std::optional<retained_id> coldest_warm() const;

  /// The last use of the least recently used entry; nullopt when empty.
  std::optional<std::chrono::steady_clock::time_point> oldest_use() const;

  /// Entries idle for longer than `ttl` (none if ttl is zero), by id.
  std::vector<retained_id> idle_since(std::chrono::steady_clock::time_point now,
                                      std::chrono::milliseconds ttl) const;

  /// The entry owning a snapshot, if any.
  std::optional<retained_id> by_snapshot(ipc::snapshot_handle h) const;

  const retained_entry* find(retained_id id) const;
  std::span<const backends::token_id> tokens(retained_id id) const { return index_.tokens(id); }
  std::vector<retained_id> ids() const;
  std::size_t size() const noexcept { return entries_.size(); }

private:
  using use_key = std::pair<std::chrono::steady_clock::time_point, retained_id>;

  void drop_if_empty(retained_id id);
  retained_id insert(prefix_scope scope, std::span<const backends::token_id> tokens,
                     retained_origin origin, std::chrono::steady_clock::time_point now,
                     std::vector<superseded>& dropped);
  static std::uint64_t snapshot_key(ipc::snapshot_handle h) noexcept {
    return (std::uint64_t{h.index} << 32) | h.generation;
  }

  prefix_index index_;
  std::uint32_t min_prefix_;
  retained_id next_id_ = 1;
  std::unordered_map<retained_id, retained_entry> entries_;
  // Indexes kept with entries_, so the per-event questions (the coldest warm
  // entry, the next to expire, whose snapshot the store evicted) do not walk
  // every entry.
  std::set<use_key> by_use_;                                   ///< every entry, by last use
  std::unordered_map<std::uint64_t, retained_id> by_snapshot_; ///< entries with a stored copy
};

} // namespace kvlane::actors
