#include "ipc/snapshot_store.hpp"

#include "ipc/snapshot_store_detail.hpp"

#include "common/align.hpp"
#include "common/logging.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>

namespace kvlane::ipc {

using store_detail::add_time;
using store_detail::clock;
using store_detail::fail;
using store_detail::stale;

std::string to_string(snapshot_handle h) {
  return std::to_string(h.index) + "#" + std::to_string(h.generation);
}

std::string_view to_string(evict_reason r) noexcept {
  switch (r) {
    case evict_reason::pressure: return "pressure";
    case evict_reason::retained_share: return "retained_share";
  }
  return "unknown";
}

std::string_view to_string(eviction_value v) noexcept {
  switch (v) {
    case eviction_value::cost: return "cost";
    case eviction_value::recency: return "recency";
  }
  return "unknown";
}

snapshot_store::snapshot_store(memfd_arena arena, std::uint64_t capacity, std::uint64_t limit,
                               std::uint64_t granularity, std::uint64_t retained_limit,
                               eviction_value value, std::uint64_t warm_target)
  : arena_(std::move(arena)), capacity_(capacity), limit_(limit), granularity_(granularity),
    retained_limit_(retained_limit), value_(value), warm_target_(warm_target) {
  free_.emplace(0, capacity_);
}

snapshot_store::~snapshot_store() = default;

expected<std::unique_ptr<snapshot_store>, store_error>
snapshot_store::create(memfd_arena arena, store_options options) {
  const std::uint64_t gran = options.granularity;
  if (gran < page_size() || (gran & (gran - 1)) != 0)
    return fail(store_errc::invalid_argument,
                "granularity " + std::to_string(gran)
                  + " must be a power of two of at least the page size ("
                  + std::to_string(page_size()) + ")");
  const std::uint64_t capacity = arena.size() / gran * gran;
  if (capacity == 0)
    return fail(store_errc::invalid_argument, "arena is smaller than one allocation unit");
  const std::uint64_t limit = options.limit_bytes == 0 ? capacity : options.limit_bytes;
  if (limit > capacity)
    return fail(store_errc::invalid_argument,
                "limit " + std::to_string(limit) + " exceeds the arena ("
                  + std::to_string(capacity) + " usable bytes)");
  const std::uint64_t retained_limit = options.retained_limit_bytes.value_or(limit);
  if (retained_limit > limit)
    return fail(store_errc::invalid_argument,
                "retained limit " + std::to_string(retained_limit) + " exceeds the limit ("
                  + std::to_string(limit) + ")");
  const std::uint64_t warm_target = std::min(options.warm_pool_bytes, limit) / gran * gran;
  if (options.prefault_warm_pool && warm_target > 0)
    if (auto r = arena.commit(0, warm_target); !r)
      return fail(r.error().code, "committing the warm pool of " + std::to_string(warm_target)
                                    + " bytes: " + r.error().message);
  auto store = std::unique_ptr<snapshot_store>(new snapshot_store(
    std::move(arena), capacity, limit, gran, retained_limit, options.value, warm_target));
  if (options.prefault_warm_pool && warm_target > 0) {
    // The committed range is free: it is the pool (no lock needed before the store is shared).
    store->warm_.emplace(0, warm_target);
    store->warm_bytes_ = warm_target;
  }
  return store;
}

void snapshot_store::set_retained_limit(std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  retained_limit_ = std::min(bytes, limit_);
}

// Greedy-dual value: an entry's credit is what losing it costs per byte it
// holds (recompute tokens per allocation unit) on top of the class's
// inflation, which rises to each victim's credit. An entry untouched while
// others are evicted thus loses value against fresh ones, and a long context
// outlives short ones of the same size: a 4,000-token full-slot snapshot
// outranks a 10-token one until 400 evictions of short ones have aged it.
// Recency mode keeps every credit at 0, so last use alone decides.
void snapshot_store::touch_locked(entry& e) {
  e.last_use = ++tick_;
  if (value_ == eviction_value::recency || e.size == 0) {
    e.credit = 0;
    return;
  }
  const double units = static_cast<double>(e.size) / static_cast<double>(granularity_);
  e.credit = inflation_[e.meta.retained ? 1 : 0] + static_cast<double>(e.meta.cache_len) / units;
}

expected<void, store_error> snapshot_store::register_model(std::uint32_t model_index,
                                                           std::uint64_t floor_bytes,
                                                           std::uint64_t cap_bytes) {
  if (cap_bytes != 0 && floor_bytes > cap_bytes)
    return fail(store_errc::invalid_argument, "model " + std::to_string(model_index)
                                                + ": floor exceeds cap");
  std::lock_guard lock(mutex_);
  std::uint64_t floors = floor_bytes;
  for (const auto& [index, account] : models_)
    if (index != model_index)
      floors += account.floor;
  if (floors > limit_)
    return fail(store_errc::invalid_argument,
                "model " + std::to_string(model_index) + ": floors of all models ("
                  + std::to_string(floors) + ") exceed the limit (" + std::to_string(limit_) + ")");
  auto& account = models_[model_index];
  account.floor = floor_bytes;
  account.cap = cap_bytes;
  return {};
}

expected<void, store_error> snapshot_store::commit(snapshot_handle h) {
  std::vector<extent> cold;
  {
    std::lock_guard lock(mutex_);
    entry* e = find_locked(h);
    if (e == nullptr)
      return stale(h);
    if (e->state != entry_state::writing)
      return fail(store_errc::invalid_argument,
                  "snapshot " + to_string(h) + " is not being written (commit before seal)");
    if (e->cold.empty())
      return {};
    cold = std::move(e->cold);
    e->cold.clear();
    ++e->readers; // a free() meanwhile must not return the range while it is being faulted in
  }
  const auto start = clock::now();
  std::uint64_t bytes = 0;
  expected<void, store_error> result;
  for (const extent& x : cold) {
    if (result = arena_.commit(x.offset, x.size); !result)
      break;
    bytes += x.size;
  }
  std::vector<extent> released;
  bool freed_meanwhile = false;
  {
    std::lock_guard lock(mutex_);
    add_time(host_.commit, start);
    host_.committed_on_demand_bytes += bytes;
    entry& e = entries_[h.index];
    freed_meanwhile = e.doomed;
    if (result && !freed_meanwhile)
      e.committed = true;
    else if (!result)
      e.cold = std::move(cold); // still unknown: treated as cold when freed
    end_read_locked(h.index, released);
  }
  release_unlocked(released);
  if (!result)
    return result;
  if (freed_meanwhile)
    return stale(h);
  return {};
}

expected<void, store_error> snapshot_store::seal(snapshot_handle h) {
  std::span<const std::byte> data;
  std::uint64_t seed = 0;
  {
    std::lock_guard lock(mutex_);
    entry* e = find_locked(h);
    if (e == nullptr)
      return stale(h);
    if (e->state != entry_state::writing)
      return fail(store_errc::invalid_argument,
                  "snapshot " + to_string(h) + " is not being written (sealed twice?)");
    e->state = entry_state::sealing;
    ++e->readers;
    data = arena_.bytes(e->offset, e->length);
    seed = e->seed;
  }
  const auto start = clock::now();
  const std::uint64_t sum = checksum64(data, seed);
  std::vector<extent> released;
  bool freed_meanwhile = false;
  {
    std::lock_guard lock(mutex_);
    add_time(host_.seal, start);
    entry& e = entries_[h.index];
    freed_meanwhile = e.doomed;
    if (!freed_meanwhile) {
      e.checksum = sum;
      e.state = entry_state::sealed;
      touch_locked(e);
      if (disk_ && e.meta.retained && e.label)
        disk_->sealed(h); // queued: the disk lane writes the copy
    }
    end_read_locked(h.index, released);
  }
  release_unlocked(released);
  if (freed_meanwhile)
    return stale(h);
  return {};
}

expected<void, store_error> snapshot_store::verify(snapshot_handle h,
                                                   std::optional<std::uint64_t> expected_generation) {
  // A snapshot on disk only is read back into the arena first (on the
  // caller's thread: a lane's), then checked like any other.
  const auto fetched = fetch_from_disk(h);
  if (!fetched)
    return unexpected(fetched.error());
  std::span<const std::byte> data;
  std::uint64_t seed = 0;
  std::uint64_t stored = 0;
  {
    std::lock_guard lock(mutex_);
    entry* e = find_locked(h);
    if (e == nullptr)
      return stale(h);
    if (e->state != entry_state::sealed)
      return fail(store_errc::invalid_argument, "snapshot " + to_string(h) + " is not sealed");
    if (expected_generation && *expected_generation != e->meta.generation)
      return fail(store_errc::corrupt, "snapshot " + to_string(h) + " has generation "
                                         + std::to_string(e->meta.generation) + ", expected "
                                         + std::to_string(*expected_generation));
    ++e->readers;
    data = arena_.bytes(e->offset, e->length);
    seed = e->seed;
    stored = e->checksum;
  }
  const auto start = clock::now();
  const std::uint64_t sum = checksum64(data, seed);
  std::vector<extent> released;
  bool freed_meanwhile = false;
  {
    std::lock_guard lock(mutex_);
    add_time(host_.verify, start);
    freed_meanwhile = entries_[h.index].doomed;
    end_read_locked(h.index, released);
  }
  release_unlocked(released);
  if (freed_meanwhile)
    return stale(h);
  if (sum != stored) {
    if (*fetched) {
      // The bytes that came from disk are not what was sealed: the file goes.
      count_discard(discard_reason::disk_corrupt);
      (void)free(h);
      return fail(store_errc::corrupt,
                  "snapshot " + to_string(h) + ": its disk copy fails its checksum (deleted)");
    }
    return fail(store_errc::corrupt, "snapshot " + to_string(h) + ": checksum mismatch");
  }
  return {};
}

expected<std::span<const std::byte>, store_error> snapshot_store::read(snapshot_handle h) const {
  std::lock_guard lock(mutex_);
  const entry* e = find_locked(h);
  if (e == nullptr)
    return stale(h);
  if (e->state != entry_state::sealed)
    return fail(store_errc::invalid_argument, "snapshot " + to_string(h) + " is not sealed");
  return std::span<const std::byte>(arena_.bytes(e->offset, e->length));
}

expected<snapshot_meta, store_error> snapshot_store::meta(snapshot_handle h) const {
  std::lock_guard lock(mutex_);
  const entry* e = find_locked(h);
  if (e == nullptr)
    return stale(h);
  return e->meta;
}

expected<std::shared_ptr<const snapshot_label>, store_error>
snapshot_store::label(snapshot_handle h) const {
  std::lock_guard lock(mutex_);
  const entry* e = find_locked(h);
  if (e == nullptr)
    return stale(h);
  return e->label;
}

expected<void, store_error> snapshot_store::set_fingerprint(std::uint32_t model_index,
                                                            std::string model,
                                                            kv_fingerprint fingerprint) {
  std::lock_guard lock(mutex_);
  const auto it = models_.find(model_index);
  if (it == models_.end())
    return fail(store_errc::invalid_argument,
                "model " + std::to_string(model_index) + " is not registered");
  it->second.name = std::move(model);
  it->second.fingerprint = std::move(fingerprint);
  return {};
}

std::optional<kv_fingerprint> snapshot_store::fingerprint(std::uint32_t model_index) const {
  std::lock_guard lock(mutex_);
  const auto it = models_.find(model_index);
  if (it == models_.end())
    return std::nullopt;
  return it->second.fingerprint;
}

void snapshot_store::count_discard(discard_reason reason, std::uint64_t n) {
  std::lock_guard lock(mutex_);
  discarded_[static_cast<std::size_t>(reason)] += n;
}

expected<void, store_error> snapshot_store::pin(snapshot_handle h) {
  std::lock_guard lock(mutex_);
  entry* e = find_locked(h);
  if (e == nullptr)
    return stale(h);
  if (e->state != entry_state::sealed && e->state != entry_state::on_disk)
    return fail(store_errc::invalid_argument, "snapshot " + to_string(h) + " is not sealed");
  ++e->pins;
  touch_locked(*e);
  return {};
}

expected<void, store_error> snapshot_store::unpin(snapshot_handle h) {
  std::vector<extent> released;
  {
    std::lock_guard lock(mutex_);
    // A doomed snapshot's handle is stale for everything but unpin().
    if (h.index >= entries_.size() || entries_[h.index].state == entry_state::vacant
        || entries_[h.index].generation != h.generation)
      return stale(h);
    entry& e = entries_[h.index];
    if (e.pins == 0)
      return fail(store_errc::invalid_argument, "snapshot " + to_string(h) + " is not pinned");
    --e.pins;
    if (e.doomed && e.pins == 0 && e.readers == 0)
      retire_locked(h.index, released);
  }
  release_unlocked(released);
  return {};
}

expected<void, store_error> snapshot_store::free(snapshot_handle h) {
  std::vector<extent> released;
  {
    std::lock_guard lock(mutex_);
    entry* e = find_locked(h);
    if (e == nullptr)
      return stale(h);
    if (e->pins > 0 || e->readers > 0)
      e->doomed = true;
    else
      retire_locked(h.index, released);
  }
  release_unlocked(released);
  return {};
}

store_stats snapshot_store::stats() const {
  store_stats s;
  {
    std::lock_guard lock(mutex_);
    s.limit_bytes = limit_;
    s.arena_bytes = capacity_;
    s.used_bytes = used_;
    s.snapshots = snapshots_;
    s.evictions = evictions_;
    s.retained_limit_bytes = retained_limit_;
    s.retained_bytes = retained_used_;
    s.retained_snapshots = retained_snapshots_;
    s.peak_retained_bytes = peak_retained_;
    s.parked_evictions = parked_evictions_;
    s.retained_evictions = retained_evictions_;
    s.retained_share_evictions = retained_share_evictions_;
    s.peak_used_bytes = peak_used_;
    s.peak_snapshots = peak_snapshots_;
    s.evicted_bytes = evicted_bytes_;
    s.release_failures = release_failures_;
    s.pool_bytes = warm_bytes_;
    s.pool_target_bytes = warm_target_;
    s.host = host_;
    s.discarded = discarded_;
    s.restored_snapshots = restored_;
    s.disk_demotions = disk_demotions_;
    s.disk_fetches = disk_fetches_;
    s.disk_fetch_bytes = disk_fetch_bytes_;
    for (const entry& e : entries_)
      if (e.disk_id != 0 && !e.doomed) {
        ++s.disk_snapshots;
        s.disk_only_snapshots += e.state == entry_state::on_disk;
      }
    for (const auto& [offset, size] : free_)
      s.largest_free_bytes = std::max(s.largest_free_bytes, size);
    for (const auto& [index, account] : models_)
      s.models.push_back(model_usage{index, account.floor, account.cap, account.used,
                                     account.snapshots, account.parked_evictions,
                                     account.retained_evictions});
  }
  // fstat of our own memfd cannot fail short of a kernel bug; 0 keeps stats total.
  const auto committed = arena_.committed_bytes();
  s.committed_bytes = committed ? *committed : 0;
  return s;
}

std::uint32_t snapshot_store::new_entry_locked() {
  if (!vacant_.empty()) {
    const std::uint32_t index = vacant_.back();
    vacant_.pop_back();
    return index;
  }
  entries_.emplace_back();
  return static_cast<std::uint32_t>(entries_.size() - 1);
}

snapshot_store::entry* snapshot_store::find_locked(snapshot_handle h) {
  return const_cast<entry*>(std::as_const(*this).find_locked(h));
}

const snapshot_store::entry* snapshot_store::find_locked(snapshot_handle h) const {
  if (h.index >= entries_.size())
    return nullptr;
  const entry& e = entries_[h.index];
  if (e.state == entry_state::vacant || e.generation != h.generation || e.doomed)
    return nullptr;
  return &e;
}


} // namespace kvlane::ipc
