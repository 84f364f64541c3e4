#pragma once

// kvlane::actors::kv_keeper — one model's KV that lives outside a running
// sequence's slot: retained entries (a finished request's KV kept for reuse,
// warm in its slot or sealed in the snapshot store) and the snapshots of
// parked sequences.
//
// Problem it solves: every snapshot the scheduler holds is a store
// reservation someone must free exactly once, and the store may evict it for
// another reservation at any time. This unit owns all of them: it reserves,
// pins, unpins and frees, keeps each retained entry's and each parked
// sequence's snapshot handle, learns what the store evicted for its own
// reservations, and decides what retained KV does — which prefix a prompt
// reuses (a warm slot, or a stored snapshot when the cost model says a load
// beats the prefill), which warm entry is dumped or dropped when its slot is
// needed, which entries the idle TTL or an admin drop removes.
//
// Contract: values and store calls in, decisions out. It sends nothing and
// reads no clock (times are passed in); the scheduler actor forwards events
// to it and carries out what it returns: the transfer jobs to send to a lane,
// and the parked sequences whose snapshot the store evicted (they recompute).
// The actor keeps each sequence's state (kv_state); the keeper's view of a
// sequence's snapshot follows the calls it gets (dump started, dump done,
// restore, load done, release).
//
// Threading: none; owned and used by one scheduler.

#include "actors/cost_model.hpp"
#include "actors/messages.hpp"
#include "actors/retention.hpp"
#include "actors/reuse_policy.hpp"
#include "actors/transfer_tracker.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvlane::actors {

/// Token block of the prefix index: matches are exact to the token (the index
/// extends them past the last full block), so the block only sets the
/// shortest findable prefix and the index's size (one key per 16 tokens).
inline constexpr std::uint32_t reuse_block_tokens = 16;

/// The hash of the first reuse block of `tokens`, if they have one. Every
/// reuse match covers at least that block, so a prompt can only match an
/// entry with the same head.
std::optional<std::uint64_t> reuse_head_of(std::span<const token_id> tokens) noexcept;

/// The owner of a retained entry when reuse is widened to every user.
inline constexpr std::uint64_t shared_owner = ~std::uint64_t{0};

/// The owner of requests that come without a peer uid (the HTTP API): they
/// reuse each other's KV, never a local user's (uids are 32-bit).
inline constexpr std::uint64_t http_owner = std::uint64_t{1} << 32;

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

struct kv_keeper_setup {
  std::shared_ptr<ipc::snapshot_store> store;
  std::uint64_t model_identity = 0; ///< backend_info::identity, in every snapshot's metadata
  std::uint32_t model_index = 0;    ///< the store's model index this scheduler charges
  std::uint32_t slots = 0;
  bool snapshots = true; ///< the device can dump and load (caps.snapshots); else warm KV only
  /// Bytes of a snapshot that covers n positions (backend::snapshot_size).
  std::function<std::uint64_t(std::uint32_t)> snapshot_size;
};

/// What the keeper counted (folded into scheduler_stats).
struct kv_keeper_counters {
  std::uint64_t reuse_hits = 0, reuse_warm_hits = 0, reused_tokens = 0, reuse_recomputed = 0;
  std::uint64_t retained_dumps = 0, retained_dropped = 0, retained_lost = 0;
  std::uint64_t retained_expired = 0, retained_superseded = 0, retained_admin_dropped = 0;
  std::uint64_t snapshots_lost = 0; ///< parked sequences whose snapshot was evicted or gone
  std::uint64_t retained_restored = 0; ///< entries taken back from an earlier daemon's store
  std::uint64_t retained_discarded = 0; ///< stored entries refused: fingerprint, tokens, checksum
};

/// What the scheduler carries out after a keeper decision.
struct kv_jobs {
  std::vector<transfer_job_ptr> transfers; ///< send each to the lane, in order
  /// Parked sequences whose snapshot the store evicted: they recompute (queued, no KV).
  std::vector<seq_id> lost;
};

/// How a queued sequence just given a slot starts (kv_keeper::start_from_retained).
struct reuse_start {
  enum class kind : std::uint8_t {
    prefill, ///< no usable retained KV: prefill from position 0 in the given slot
    warm,    ///< take `slot` (a warm entry's; hand the given one back), resident at `length`
    load,    ///< `job` loads a retained snapshot; roll back to `length` when it ends
  };
  kind how = kind::prefill;
  slot_id slot = 0;
  std::uint32_t length = 0;
  kv_jobs jobs; ///< load: the load job (and nothing lost)
};

class kv_keeper {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Starts with the knobs `reuse` as given (set_reuse adapts them to the device).
  kv_keeper(kv_keeper_setup setup, const reuse_policy& reuse);

  // -- the [reuse] knobs ----------------------------------------------------------

  /// Applies new knobs: a device without snapshots keeps retained KV in its
  /// slots only; mode off drops every entry at once.
  void set_reuse(const reuse_policy& p);
  const reuse_policy& reuse() const noexcept { return reuse_; }

  // -- retained KV ----------------------------------------------------------------

  /// Takes the retained snapshots the store recovered for this model after a
  /// restart (snapshot_store::take_restored) as stored entries, each checked
  /// against the loaded model's fingerprint and its own tokens first.
  /// Returns how many were taken.
  std::size_t adopt_restored(time_point now);

  /// A request that ended normally leaves its first `tokens` (exactly the KV
  /// in `slot`) warm there, unless reuse is off or they are shorter than the
  /// minimum. Entries of the same scope it supersedes are removed and freed.
  /// True when the slot stays held by the entry.
  bool retain(std::uint64_t owner, const std::string& session, std::span<const token_id> tokens,
              slot_id slot, time_point now);

  /// The longest retained prefix a prompt of `owner` may reuse (the last
  /// token is always prefilled: its logits give the next token).
  std::optional<retained_match> find_reusable(std::uint64_t owner,
                                              std::span<const token_id> tokens) const;

  /// A queued sequence just given `slot` starts from retained KV if it can:
  /// a warm slot, or a stored snapshot when `costs` says a load beats
  /// prefilling the matched tokens (the dump is paid already).
  reuse_start start_from_retained(seq_id id, std::uint64_t owner, std::span<const token_id> tokens,
                                  slot_id slot, const cost_model& costs, time_point now);

  /// A sequence takes the warm slot of `m` (a warm match): the entry's warm
  /// copy is consumed and counted as a hit. Returns the slot.
  slot_id take_warm(const retained_match& m, time_point now);

  /// Sorted heads (reuse_head_of) of the warm entries: only queued sequences
  /// with one of them can take a warm slot.
  std::vector<std::uint64_t> warm_heads() const;
  bool any_warm() const noexcept { return warm_count_ > 0; }
  /// The retained entry warm in `slot`, if any: the slot planner sees it held.
  bool warm_in(slot_id slot) const { return warm_[slot].has_value(); }

  /// Warm slots go before any live sequence is evicted. While `free +
  /// promised < wanted` (free: slots neither held nor warm; promised: slots
  /// whose dump is under way; wanted: target sequences without a slot plus
  /// the spare), the coldest warm entry is dumped into the store when the
  /// mode is store, the store has room and the dump pays (its slot frees when
  /// the dump ends), else dropped at once. The dump pays when the lane is
  /// idle, or when waiting behind `backlog` plus the dump itself costs less
  /// than re-prefilling the entry when its conversation comes back (both by
  /// `costs`; unmeasured figures: only an idle lane).
  kv_jobs reclaim_warm(std::uint32_t wanted, std::uint32_t free, std::uint32_t promised,
                       lane_backlog backlog, const cost_model& costs);

  /// The daemon is about to stop: from now on every reclaim_warm dumps the
  /// coldest warm entry into the store whenever the lane is idle (one the
  /// store cannot take, or any in a mode without store reuse, is dropped),
  /// so retained KV survives a restart. Done when warm_count() is 0.
  void flush_warm() noexcept { flushing_ = true; }

  /// A retained entry's dump ended; true when its copy is now in the store.
  bool retained_dump_done(const transfer_job& job, bool ok);

  /// Drops entries idle past the TTL: at once when `due` (the expiry timer),
  /// else at most once a second. True when something went.
  bool expire_idle(time_point now, bool due);
  /// When the expiry timer must fire, if it must be armed (earlier than the
  /// one armed, or none is). Marks it armed.
  std::optional<time_point> expiry_to_arm();
  /// The armed expiry timer fired (or a new TTL voids it).
  void expiry_fired() noexcept { expiry_due_.reset(); }

  /// Removes the selected entries and frees what they hold.
  retained_drop_result drop(const retained_drop_request& req);
  void drop_all();
  /// The daemon stops: warm copies go with their slots, but stored snapshots
  /// stay sealed in the store (the engine records them in the store's index
  /// for the next start); the keeper forgets every entry.
  void shutdown();

  // -- parked sequences -----------------------------------------------------------

  /// Reserves a snapshot for evicting resident `id` by a swap. No job when
  /// the store cannot hold it (`why` says why): the sequence recomputes.
  kv_jobs swap_out(seq_id id, slot_id slot, std::uint32_t kv_len, std::uint64_t generation,
                   std::uint8_t priority, std::string& why);
  /// The dump of a sequence ended: parked on success, else its snapshot is
  /// freed and forgotten.
  void dump_done(seq_id id, const transfer_job& job, bool ok);
  /// Pins parked `id`'s snapshot and makes the load into `slot`. No job when
  /// the store lost it: the sequence recomputes.
  kv_jobs restore(seq_id id, slot_id slot, std::uint32_t kv_len, std::uint64_t generation);
  /// A load ended: unpins, frees a sequence's snapshot (a retained one stays
  /// for later requests, unless it failed verification).
  void load_done(const transfer_done& done);
  /// A load of a retained snapshot into a live sequence succeeded: a hit of
  /// `length` tokens.
  void count_stored_hit(std::uint32_t length) noexcept;
  /// The parked sequence `id` ends: its snapshot goes back to the store.
  void release(seq_id id);
  /// Whether `id`'s KV is parked (its dump ended and it is not loading).
  bool parked(seq_id id) const;

  // -- figures ---------------------------------------------------------------------

  const retention& retained() const noexcept { return retained_; }
  const kv_keeper_counters& counters() const noexcept { return counters_; }
  std::uint32_t warm_count() const noexcept { return warm_count_; }
  /// Store bytes a snapshot of `kv_len` positions is charged (rounded up to
  /// the store's granularity); the KV bytes of `kv_len` positions in a slot.
  std::uint64_t store_bytes_of(std::uint32_t kv_len) const;
  std::uint64_t snapshot_size(std::uint32_t kv_len) const { return setup_.snapshot_size(kv_len); }
  /// Where a stored entry's snapshot is (memory, disk or both); none when not stored.
  std::optional<ipc::snapshot_tier> tier_of(const retained_entry& e) const;

private:
  enum class stage : std::uint8_t { dumping, parked, loading };
  struct parked_kv {
    ipc::snapshot_handle handle;
    stage at = stage::dumping;
  };

  prefix_scope scope_of(std::uint64_t owner) const;
  void set_warm(slot_id slot, std::optional<retained_id> id);
  void discard(std::optional<slot_id> slot, std::optional<ipc::snapshot_handle> snapshot,
               bool dumping);
  void drop_warm(retained_id id);
  /// reclaim_warm's test: dumping retained entry `id` behind `backlog` pays.
  bool retained_dump_pays(retained_id id, const lane_backlog& backlog,
                          const cost_model& costs) const;
  transfer_job_ptr dump_retained(retained_id id, kv_jobs& jobs);
  void forget_retained_snapshot(ipc::snapshot_handle h);
  void forget_evicted(const std::vector<ipc::evicted_snapshot>& evicted, kv_jobs& jobs);
  bool usable(const retained_match& m, std::span<const token_id> prompt);
  void refuse(ipc::snapshot_handle h, ipc::discard_reason why);

  kv_keeper_setup setup_;
  ipc::kv_fingerprint fingerprint_; ///< the loaded model's, recorded in every retained snapshot
  reuse_policy reuse_;
  retention retained_;
  std::vector<std::optional<retained_id>> warm_; ///< per slot: the retained entry warm in it
  std::uint32_t warm_count_ = 0;
  bool flushing_ = false; ///< flush_warm: every warm entry goes to the store
  std::unordered_map<seq_id, parked_kv> parked_; ///< sequences' snapshots: dumping, parked, loading
  time_point last_expiry_check_{};
  std::optional<time_point> expiry_due_; ///< when the armed expiry timer fires
  kv_keeper_counters counters_;
};

} // namespace kvlane::actors
