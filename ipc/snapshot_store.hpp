#pragma once

// kvlane::ipc::snapshot_store — host store for parked KV snapshots.
//
// Problem it solves: the scheduler preempts sequences by dumping their slot's
// KV into host memory and loading it back later. The store hands out
// writable ranges of one elastic memfd arena (the transfer lane dumps straight
// into them, no extra copy), seals them with a checksum, shares one memory
// limit between all models with a per-model floor and cap, and, when full,
// evicts the least valuable parked snapshots and reports them so their
// sequences can be marked "dropped -> recompute". RAM follows live data plus
// a bounded warm pool: freed ranges stay committed up to the pool target (so
// the next dump takes no page fault), and are punched out beyond it.
// Design notes: docs/snapshot-store.md.
//
// Lifecycle of a snapshot:
//   reserve() -> writing: the caller owns the bytes and fills them
//                (commit() first makes the fill fault-free)
//   seal()    -> sealed: checksummed, readable, evictable unless pinned
//   free(), or eviction by a later reserve() -> the handle goes stale
// With a disk tier attached (attach_disk), a retained snapshot whose copy is
// on disk is not dropped by an eviction but goes to "on disk" (its handle
// stays good, it holds no bytes of the arena); verify() reads it back first.
//
// Thread contract:
//  - Every method is thread-safe. One internal mutex guards metadata only; it
//    is never held while snapshot bytes are hashed or pages are faulted in or
//    punched.
//  - The bytes of a `writing` snapshot are written by the one owner of its
//    handle, who then seals it. Sealed bytes are never written again.
//  - A sealed snapshot may be evicted by any other thread's reserve() unless
//    it is pinned: pin() before read()/load, unpin() after. A span from read()
//    stays valid while the snapshot is pinned (or until free/eviction if not).
//  - free() on a pinned snapshot makes the handle stale at once; the bytes
//    stay valid for the pinner and go back to the pool at the last unpin().
//  - Errors are values; no method throws except std::bad_alloc.

#include "common/expected.hpp"
#include "ipc/disk_backing.hpp"
#include "ipc/disk_format.hpp"
#include "ipc/memfd_arena.hpp"
#include "ipc/snapshot_label.hpp"
#include "ipc/store_index.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::ipc {

/// What a snapshot is; stored beside the bytes and seeded into the checksum.
struct snapshot_meta {
  std::uint64_t model_identity = 0; ///< backend_info::identity of the model that dumped it
  std::uint32_t model_index = 0;    ///< which registered model it is charged to
  std::uint32_t cache_len = 0;      ///< tokens the snapshot covers: what losing it costs to recompute
  std::uint64_t generation = 0;     ///< the sequence's KV generation when dumped
  std::uint64_t sequence_id = 0;    ///< sequence (or retained conversation) it belongs to
  std::uint8_t priority = 0;        ///< parked: higher is more valuable; ignored when retained
  bool retained = false;            ///< a finished conversation kept as a reusable prefix:
                                    ///< less valuable than every parked snapshot
};

/// Names one snapshot: a small value, copy it freely. Once the snapshot is
/// freed or evicted every call with the handle answers store_errc::stale.
struct snapshot_handle {
  std::uint32_t index = 0;
  std::uint32_t generation = 0; ///< 0 never names a snapshot
  friend bool operator==(const snapshot_handle&, const snapshot_handle&) = default;
};

/// Why reserve() dropped a snapshot.
enum class evict_reason : std::uint8_t {
  pressure,       ///< the store's limit or the model's cap needed the room
  retained_share, ///< a retained reservation needed room within the retained share
};

std::string_view to_string(evict_reason r) noexcept;

/// A snapshot dropped to make room. A parked one's sequence must recompute;
/// a retained one is simply no longer reusable.
struct evicted_snapshot {
  snapshot_handle handle;
  snapshot_meta meta;
  std::uint64_t bytes = 0; ///< bytes charged (rounded to the granularity)
  evict_reason reason = evict_reason::pressure;
};

/// A retained snapshot taken back from an earlier daemon's arena (recover,
/// claim): sealed, charged to its model, and labelled.
struct restored_snapshot {
  snapshot_handle handle;
  std::shared_ptr<const snapshot_label> label;
  std::uint32_t cache_len = 0;
};

/// What recover() found in an inherited arena and index.
struct recovery_result {
  std::uint64_t records = 0;  ///< snapshots the index listed (pending until claimed)
  std::uint64_t bytes = 0;    ///< bytes they hold
  std::uint64_t punched_bytes = 0; ///< free bytes of the arena returned to the OS
};

struct reservation {
  snapshot_handle handle;
  std::span<std::byte> bytes;            ///< exactly the requested size; contents unspecified
  std::vector<evicted_snapshot> evicted; ///< snapshots evicted to make room, lowest first
};

/// Where a sealed snapshot's bytes are (docs/snapshot-store.md, "Disk tier").
enum class snapshot_tier : std::uint8_t {
  memory, ///< in the arena only
  disk,   ///< in a file of the disk tier only: a load reads it back first
  both,   ///< in the arena, with a copy on disk
};

std::string_view to_string(snapshot_tier t) noexcept;

/// A retained snapshot's bytes and what its disk copy records
/// (snapshot_store::begin_write_back).
struct write_back {
  disk_entry entry; ///< id 0: the writer assigns it
  std::span<const std::byte> bytes;
};

/// How snapshots of one class (parked, retained) are ranked for eviction.
enum class eviction_value : std::uint8_t {
  cost,    ///< recompute cost per byte held, aged by use (greedy-dual): the default
  recency, ///< least recently used first
};

std::string_view to_string(eviction_value v) noexcept;

struct store_options {
  std::uint64_t limit_bytes = 0;         ///< most bytes reserved at once; 0 = the arena size
  std::uint64_t granularity = 64 * 1024; ///< allocation unit: power of two, >= the OS page
  std::optional<std::uint64_t> retained_limit_bytes; ///< most bytes retained snapshots hold; none: the limit
  eviction_value value = eviction_value::cost;
  /// Free bytes kept committed (the warm pool) so later dumps take no page
  /// fault; freed ranges beyond it are punched. Rounded down to the
  /// granularity; at most the limit. 0 = punch everything at once.
  std::uint64_t warm_pool_bytes = 0;
  /// Commit the whole pool when the store is created, so the first dumps take
  /// no page fault either (the pool's RAM is held from the start).
  bool prefault_warm_pool = false;
};

/// Host time spent in one phase of the data path since the store was created.
struct phase_time {
  std::uint64_t count = 0; ///< calls that did work in this phase
  std::uint64_t ns = 0;    ///< steady_clock nanoseconds, summed
};

/// Where the store's host time goes (always on: two clock reads per call).
/// The copy itself is the writer's (backend::dump) and the loader's.
struct store_host_times {
  phase_time reserve; ///< reserve(): placement, eviction planning, bookkeeping
  phase_time commit;  ///< commit(): page faults taken up front on cold pages
  phase_time seal;    ///< seal(): the checksum pass
  phase_time verify;  ///< verify(): the checksum pass before a load
  phase_time punch;   ///< fallocate(PUNCH_HOLE) of freed ranges above the pool target
  std::uint64_t punched_bytes = 0;
  std::uint64_t committed_on_demand_bytes = 0; ///< cold bytes commit() had to fault in
};

struct model_usage {
  std::uint32_t model_index = 0;
  std::uint64_t floor_bytes = 0;
  std::uint64_t cap_bytes = 0; ///< 0 = no cap
  std::uint64_t used_bytes = 0;
  std::uint64_t snapshots = 0;
  std::uint64_t parked_evictions = 0;   ///< this model's parked snapshots the store evicted
  std::uint64_t retained_evictions = 0; ///< this model's retained snapshots the store evicted
};

struct store_stats {
  std::uint64_t limit_bytes = 0;
  std::uint64_t arena_bytes = 0;
  std::uint64_t used_bytes = 0;      ///< reserved, rounded to the granularity
  std::uint64_t committed_bytes = 0; ///< RAM the kernel really holds for the arena
  std::uint64_t largest_free_bytes = 0;
  std::uint64_t snapshots = 0;
  std::uint64_t peak_used_bytes = 0; ///< highest used_bytes since creation
  std::uint64_t peak_snapshots = 0;  ///< highest snapshots since creation
  std::uint64_t retained_limit_bytes = 0;
  std::uint64_t retained_bytes = 0;     ///< used_bytes held by retained snapshots
  std::uint64_t retained_snapshots = 0;
  std::uint64_t peak_retained_bytes = 0;
  std::uint64_t evictions = 0;          ///< all classes and reasons
  std::uint64_t evicted_bytes = 0;
  std::uint64_t parked_evictions = 0;   ///< parked snapshots evicted (their sequences recompute)
  std::uint64_t retained_evictions = 0; ///< retained snapshots evicted, for any reason
  std::uint64_t retained_share_evictions = 0; ///< of which to stay within the retained share
  std::uint64_t release_failures = 0; ///< punch-hole failures (pages stayed committed)
  std::uint64_t pool_bytes = 0;        ///< free bytes kept committed (the warm pool)
  std::uint64_t pool_target_bytes = 0; ///< the pool's target (store_options::warm_pool_bytes)
  store_host_times host;
  std::vector<model_usage> models;    ///< by model_index
  discard_counts discarded{};         ///< snapshots (or indexes) discarded, by discard_reason
  std::uint64_t restored_snapshots = 0; ///< retained snapshots taken back from an earlier daemon
  std::uint64_t disk_snapshots = 0;  ///< snapshots with a copy in the disk tier
  std::uint64_t disk_only_snapshots = 0; ///< of which not in memory
  std::uint64_t disk_demotions = 0;  ///< evictions that kept the disk copy (memory -> disk)
  std::uint64_t disk_fetches = 0;    ///< snapshots read back from disk for a load
  std::uint64_t disk_fetch_bytes = 0;
};

class snapshot_store {
public:
  /// A store over `arena`. Fails with invalid_argument on a bad granularity
  /// or a limit larger than the arena.
  static expected<std::unique_ptr<snapshot_store>, store_error> create(memfd_arena arena,
                                                                       store_options options = {});

  snapshot_store(const snapshot_store&) = delete;
  snapshot_store& operator=(const snapshot_store&) = delete;
  ~snapshot_store();

  /// Declares a model (again: updates it). floor_bytes are kept available to
  /// it whatever other models do; cap_bytes bounds what it holds (0 = none).
  /// The floors of all models must fit in the limit.
  expected<void, store_error> register_model(std::uint32_t model_index, std::uint64_t floor_bytes,
                                             std::uint64_t cap_bytes);

  /// Bounds the bytes retained snapshots may hold (0: none at all; at most
  /// the limit). Takes effect at the next retained reservation; nothing is
  /// evicted now.
  void set_retained_limit(std::uint64_t bytes);

  /// Reserves `bytes` for a snapshot of meta.model_index, evicting sealed,
  /// unpinned snapshots from the least valuable up (retained before parked;
  /// within a class lowest priority, then least value by options.value) if
  /// the limit, the model's cap or (for a retained snapshot) the retained
  /// share requires it, never taking another model below its floor. A
  /// retained snapshot never evicts a parked one. Nothing is evicted when the
  /// request fails.
  /// `label` (retained snapshots) travels with the snapshot: label(), and
  /// the persistent index (snapshot_index).
  expected<reservation, store_error> reserve(const snapshot_meta& meta, std::uint64_t bytes,
                                             std::shared_ptr<const snapshot_label> label = nullptr);

  /// Commits the pages of a reservation that are not warm yet, so writing it
  /// takes no page fault (call it on the writer's thread, before the dump).
  /// A no-op when the reservation came from the warm pool. Optional: a writer
  /// that skips it faults the pages in as it writes.
  expected<void, store_error> commit(snapshot_handle h);

  /// Checksums a written snapshot; it becomes readable and evictable.
  expected<void, store_error> seal(snapshot_handle h);

  /// Recomputes the checksum (and, if given, checks the generation):
  /// corrupt on any mismatch.
  expected<void, store_error> verify(snapshot_handle h,
                                     std::optional<std::uint64_t> expected_generation = std::nullopt);

  /// The sealed bytes. Pin first if another thread may reserve meanwhile.
  expected<std::span<const std::byte>, store_error> read(snapshot_handle h) const;

  expected<snapshot_meta, store_error> meta(snapshot_handle h) const;

  /// The label given at reserve() (null when none was).
  expected<std::shared_ptr<const snapshot_label>, store_error> label(snapshot_handle h) const;

  /// The name and fingerprint of the model loaded under `model_index`
  /// (registered first): the index records snapshots under the name, and a
  /// recovered snapshot is claimed only under an equal fingerprint.
  expected<void, store_error> set_fingerprint(std::uint32_t model_index, std::string model,
                                              kv_fingerprint fingerprint);
  std::optional<kv_fingerprint> fingerprint(std::uint32_t model_index) const;

  /// Counts a snapshot (or an index) thrown away instead of used.
  void count_discard(discard_reason reason, std::uint64_t n = 1);

  // -- across a restart (docs/snapshot-store.md, "Across a restart") ----------------

  /// The index of every sealed, labelled (retained) snapshot: what
  /// index_file::write records at a clean stop. Call it when no lane writes.
  expected<index_contents, store_error> snapshot_index() const;

  /// Takes back the snapshots `index` lists in this (adopted) arena, before
  /// any reservation: their extents are set aside, pending until a model
  /// claims them; every other byte of the arena is returned to the OS. An
  /// index of another arena (size, inode, granularity) is refused
  /// (arena_changed, counted) and nothing is taken.
  expected<recovery_result, store_error> recover(const index_contents& index);

  /// Pending snapshots recorded under model name `model` become sealed
  /// retained snapshots of `model_index` when their fingerprint equals the
  /// model's (set_fingerprint first); the others are freed and counted by
  /// the field that differs. Returns how many were taken; the keeper gets
  /// them with take_restored.
  std::size_t claim(std::uint32_t model_index, std::string_view model);

  /// Frees every pending snapshot no model claimed (unknown_model).
  std::size_t discard_unclaimed();

  /// The snapshots claim() took for `model_index`, once.
  std::vector<restored_snapshot> take_restored(std::uint32_t model_index);

  // -- across a model's unload (ipc/snapshot_store_models.cpp) -------------------------

  /// Model `model_index` loads again after an unload: the retained snapshots
  /// its earlier instance left sealed in the store (flush_warm at the unload)
  /// are handed back like claimed ones (take_restored) when their label names
  /// `model` with the fingerprint now set; the others are freed and counted.
  /// Call it before the model's scheduler starts. Returns how many.
  std::size_t reclaim_unloaded(std::uint32_t model_index, std::string_view model);

  /// Frees the pending snapshots (recover) of models not in `keep`: those of
  /// a configured model stay pending until it loads and claims them.
  std::size_t discard_pending_except(const std::vector<std::string>& keep);

  /// The file persist() writes the index to (the store owns it from here).
  void attach_index(index_file file);
  /// The attached index's fd, or -1.
  int index_fd() const noexcept;
  /// Writes snapshot_index() to the attached index, closed: the last step of
  /// a clean stop. Returns the snapshots recorded.
  expected<std::size_t, store_error> persist();

  // -- the disk tier (docs/snapshot-store.md, "Disk tier"; ipc/snapshot_store_disk.cpp) --

  /// From now on retained, labelled snapshots are written back through
  /// `disk` when sealed, an evicted snapshot with a disk copy stays listed
  /// (tier disk) instead of going, and verify() reads such a snapshot back
  /// into the arena first. Null detaches it.
  void attach_disk(std::shared_ptr<disk_backing> disk);

  /// Entries an earlier daemon left in the disk tier: pending, like the
  /// index's records, until a model claims them (claim) or none does
  /// (discard_unclaimed). One equal to a snapshot recovered from the arena
  /// (same checksum, seed and length) becomes that snapshot's disk copy.
  void add_disk_entries(std::vector<disk_entry> entries);

  expected<snapshot_tier, store_error> tier(snapshot_handle h) const;

  /// Pins a sealed, labelled snapshot in memory that has no disk copy yet and
  /// returns its bytes and what its file records (end_write_back unpins).
  expected<write_back, store_error> begin_write_back(snapshot_handle h);
  /// The write of `h` ended: `disk_id` is its copy when it succeeded. False
  /// when the snapshot was freed meanwhile: the copy must be deleted.
  bool end_write_back(snapshot_handle h, std::optional<std::uint64_t> disk_id);

  /// The disk tier drops entry `disk_id` (its byte budget): a snapshot in
  /// memory keeps going without a copy, one on disk only is freed. False
  /// (keep the file) while a load reads it back.
  bool disk_evicted(std::uint64_t disk_id);

  /// Protects a sealed snapshot from eviction (counted: pin twice, unpin twice).
  expected<void, store_error> pin(snapshot_handle h);
  expected<void, store_error> unpin(snapshot_handle h);

  /// Drops a snapshot in any state: its pages go back to the OS at once
  /// (after the last unpin if it is pinned) and the handle goes stale.
  expected<void, store_error> free(snapshot_handle h);

  store_stats stats() const;

  /// The arena's memfd (for clients or zero-copy I/O later).
  int fd() const noexcept { return arena_.fd(); }
  std::uint64_t granularity() const noexcept { return granularity_; }
  std::uint64_t limit() const noexcept { return limit_; }

private:
  // on_disk: sealed, with no extent: its bytes are in the disk tier only.
  enum class entry_state : std::uint8_t { vacant, writing, sealing, sealed, on_disk };

  struct extent {
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };

  struct entry {
    snapshot_meta meta;
    std::shared_ptr<const snapshot_label> label;
    std::uint64_t seed = 0;   // the checksum's seed (meta_seed at reserve; recorded when recovered)
    std::uint64_t offset = 0;
    std::uint64_t size = 0;   // charged bytes, a multiple of the granularity
    std::uint64_t length = 0; // requested bytes
    std::uint64_t checksum = 0;
    std::uint64_t last_use = 0;
    double credit = 0;         // eviction value within its class (see touch_locked)
    std::uint32_t generation = 1;
    std::uint32_t pins = 0;    // caller pins
    std::uint32_t readers = 0; // seal()/verify() hashing outside the lock
    entry_state state = entry_state::vacant;
    bool doomed = false;    // freed while pinned or hashed: released at the last unpin
    bool committed = false; // every page of [offset, offset + size) is committed
    std::uint64_t disk_id = 0; // its copy in the disk tier; 0: none
    std::vector<extent> cold; // parts not committed yet (commit() faults them in)
  };

  struct model_account {
    std::uint64_t floor = 0;
    std::uint64_t cap = 0;
    std::uint64_t used = 0;
    std::uint64_t snapshots = 0;
    std::uint64_t parked_evictions = 0;
    std::uint64_t retained_evictions = 0;
    std::optional<kv_fingerprint> fingerprint;
    std::string name;
  };

  struct placement {
    std::uint64_t offset = 0;
    std::vector<std::uint32_t> victims; // entry indices, in eviction order
  };

  using free_map = std::map<std::uint64_t, std::uint64_t>; // offset -> size, coalesced

  snapshot_store(memfd_arena arena, std::uint64_t capacity, std::uint64_t limit,
                 std::uint64_t granularity, std::uint64_t retained_limit, eviction_value value,
                 std::uint64_t warm_target);

  std::uint32_t new_entry_locked();
  entry* find_locked(snapshot_handle h);
  const entry* find_locked(snapshot_handle h) const;
  expected<placement, store_error> place_locked(const snapshot_meta& meta, std::uint64_t need);
  void touch_locked(entry& e);
  extent detach_locked(std::uint32_t index);
  void retire_locked(std::uint32_t index, std::vector<extent>& punch);
  void recycle_locked(extent x, std::uint64_t committed_prefix, std::vector<extent>& punch);
  std::uint64_t committed_prefix(const entry& e) const noexcept;
  static std::uint64_t remove_range(free_map& map, extent x);
  void carve_locked(std::uint64_t offset, std::uint64_t size);
  void end_read_locked(std::uint32_t index, std::vector<extent>& released);
  void release_unlocked(const std::vector<extent>& ranges);
  static std::uint64_t insert_free(free_map& map, extent x);
  static std::optional<std::uint64_t> first_fit(const free_map& map, std::uint64_t need);
  extent demote_locked(std::uint32_t index);
  expected<bool, store_error> fetch_from_disk(snapshot_handle h);
  void claim_disk_locked(std::uint32_t model_index, std::string_view model,
                         const kv_fingerprint& loaded);
  disk_entry disk_entry_locked(const entry& e) const;
  /// The fingerprint model `model_index` was registered with; null when the
  /// model is unknown or has none (then nothing is claimed for it).
  const kv_fingerprint* loaded_fingerprint_locked(std::uint32_t model_index) const;
  /// Takes back a sealed retained snapshot an earlier daemon left (in the
  /// arena at `x`, or on disk only: state on_disk, an empty extent) as model
  /// `model_index`'s, claimed for it (take_restored). Returns its index.
  std::uint32_t adopt_locked(std::uint32_t model_index, std::uint32_t cache_len,
                             snapshot_label label, std::uint64_t seed, std::uint64_t checksum,
                             std::uint64_t length, extent x, entry_state state);
  /// Charges a new entry's extent to the store's and its model's usage.
  void charge_locked(const entry& e, model_account& account);

  mutable std::mutex mutex_;
  memfd_arena arena_;
  std::uint64_t capacity_;    // arena size rounded down to the granularity
  std::uint64_t limit_;
  std::uint64_t granularity_;
  std::uint64_t retained_limit_; // <= limit_
  eviction_value value_;
  double inflation_[2] = {0, 0}; // per class (parked, retained): credit of the last victim
  std::vector<entry> entries_;
  std::vector<std::uint32_t> vacant_;
  free_map free_;
  std::map<std::uint32_t, model_account> models_;
  std::uint64_t used_ = 0;
  std::uint64_t snapshots_ = 0;
  std::uint64_t tick_ = 0;
  std::uint64_t evictions_ = 0;
  std::uint64_t peak_used_ = 0;
  std::uint64_t peak_snapshots_ = 0;
  std::uint64_t evicted_bytes_ = 0;
  std::uint64_t retained_used_ = 0;
  std::uint64_t retained_snapshots_ = 0;
  std::uint64_t peak_retained_ = 0;
  std::uint64_t parked_evictions_ = 0;
  std::uint64_t retained_evictions_ = 0;
  std::uint64_t retained_share_evictions_ = 0;
  std::uint64_t release_failures_ = 0;
  free_map warm_; // the warm pool: committed parts of free_, coalesced
  std::uint64_t warm_bytes_ = 0;
  std::uint64_t warm_target_ = 0;
  store_host_times host_; // guarded by mutex_
  discard_counts discarded_{};
  std::uint64_t restored_ = 0;
  std::vector<index_record> pending_; // recovered, not claimed yet: their extents are set aside
  std::map<std::uint32_t, std::vector<restored_snapshot>> claimed_; // by model index
  std::optional<index_file> index_file_;
  std::shared_ptr<disk_backing> disk_;
  std::vector<disk_entry> disk_pending_; // listed by the disk tier, not claimed yet
  std::uint64_t disk_demotions_ = 0;
  std::uint64_t disk_fetches_ = 0;
  std::uint64_t disk_fetch_bytes_ = 0;
};

/// "<index>#<generation>", for logs and error messages.
std::string to_string(snapshot_handle h);

} // namespace kvlane::ipc
