#include "ipc/snapshot_store.hpp"

#include "common/align.hpp"
#include "common/logging.hpp"
#include "ipc/checksum.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>

namespace kvlane::ipc {

namespace {

unexpected<store_error> fail(store_errc code, std::string message) {
  return unexpected(store_error{code, std::move(message)});
}

using clock = std::chrono::steady_clock;

void add_time(phase_time& phase, clock::time_point start) noexcept {
  ++phase.count;
  phase.ns += static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count());
}

unexpected<store_error> stale(snapshot_handle h) {
  return fail(store_errc::stale, "snapshot " + to_string(h) + " is stale (freed or evicted)");
}

// The checksum is keyed by the snapshot's identity, so bytes that are intact
// but filed under another sequence, generation or model do not verify.
std::uint64_t meta_seed(const snapshot_meta& m) noexcept {
  const std::array<std::uint64_t, 4> fields{
    m.model_identity, (std::uint64_t{m.model_index} << 32) | m.cache_len, m.generation,
    m.sequence_id};
  return checksum64(std::as_bytes(std::span(fields)));
}

} // namespace

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

expected<reservation, store_error>
snapshot_store::reserve(const snapshot_meta& meta, std::uint64_t bytes,
                        std::shared_ptr<const snapshot_label> label) {
  if (bytes == 0)
    return fail(store_errc::invalid_argument, "cannot reserve 0 bytes");
  if (bytes > capacity_)
    return fail(store_errc::too_large, std::to_string(bytes) + " bytes exceed the arena");
  const std::uint64_t need = round_up(bytes, granularity_);

  const auto start = clock::now();
  reservation out;
  std::vector<extent> punch; // evicted ranges beyond the pool target, punched after the lock
  {
    std::lock_guard lock(mutex_);
    const auto account = models_.find(meta.model_index);
    if (account == models_.end())
      return fail(store_errc::invalid_argument,
                  "model " + std::to_string(meta.model_index) + " is not registered");
    auto placed = place_locked(meta, need);
    if (!placed)
      return unexpected(std::move(placed).error());

    const std::uint64_t lo = placed->offset;
    const std::uint64_t hi = lo + need;
    // A retained reservation that would overrun the retained share evicts
    // for the share; anything else evicts for the limit or the cap.
    const std::uint64_t share = retained_limit_;
    const evict_reason reason = meta.retained && retained_used_ + need > share
                                  ? evict_reason::retained_share
                                  : evict_reason::pressure;
    // Committed pages under the new extent: warm pool parts, and the
    // committed parts of victims (reused as they are: refaulting them would
    // cost more than the dump itself, see docs). The rest is cold.
    free_map hot;
    std::vector<std::pair<extent, std::uint64_t>> victims; // extent, committed prefix
    for (const std::uint32_t v : placed->victims) {
      const entry& e = entries_[v];
      // A retained snapshot with a disk copy leaves memory only: its handle
      // stays good (tier disk), so its owner is not told it is gone.
      const bool to_disk = e.meta.retained && e.disk_id != 0;
      if (!to_disk)
        out.evicted.push_back(
          evicted_snapshot{snapshot_handle{v, e.generation}, e.meta, e.size, reason});
      double& inflation = inflation_[e.meta.retained ? 1 : 0];
      inflation = std::max(inflation, e.credit);
      model_account& owner = models_.at(e.meta.model_index); // detach_locked relies on it too
      if (e.meta.retained) {
        ++retained_evictions_;
        ++owner.retained_evictions;
        if (reason == evict_reason::retained_share)
          ++retained_share_evictions_;
      } else {
        ++parked_evictions_;
        ++owner.parked_evictions;
      }
      const std::uint64_t prefix = committed_prefix(e);
      const extent x = to_disk ? demote_locked(v) : detach_locked(v);
      ++evictions_;
      evicted_bytes_ += x.size;
      insert_free(free_, x);
      victims.emplace_back(x, prefix);
      const std::uint64_t c_lo = std::max(x.offset, lo);
      const std::uint64_t c_hi = std::min(x.offset + prefix, hi);
      if (c_lo < c_hi)
        insert_free(hot, extent{c_lo, c_hi - c_lo});
    }
    carve_locked(lo, need);
    {
      // Intersections of the warm pool with [lo, hi) leave the pool.
      auto it = warm_.upper_bound(lo);
      if (it != warm_.begin())
        --it;
      for (; it != warm_.end() && it->first < hi; ++it) {
        const std::uint64_t a = std::max(it->first, lo);
        const std::uint64_t b = std::min(it->first + it->second, hi);
        if (a < b)
          insert_free(hot, extent{a, b - a});
      }
      warm_bytes_ -= remove_range(warm_, extent{lo, need});
    }
    // Victims' ranges outside the new extent go back to the pool or are punched.
    for (const auto& [x, prefix] : victims) {
      const std::uint64_t end = x.offset + x.size;
      const std::uint64_t committed_end = x.offset + prefix;
      const auto recycle_part = [&](std::uint64_t a, std::uint64_t b) {
        remove_range(free_, extent{a, b - a});
        recycle_locked(extent{a, b - a}, committed_end > a ? std::min(committed_end, b) - a : 0,
                       punch);
      };
      if (x.offset < lo)
        recycle_part(x.offset, std::min(end, lo));
      if (end > hi)
        recycle_part(std::max(x.offset, hi), end);
    }

    const std::uint32_t index = new_entry_locked();
    entry& e = entries_[index];
    e.meta = meta;
    e.label = std::move(label);
    e.seed = meta_seed(meta);
    e.offset = lo;
    e.size = need;
    e.length = bytes;
    e.checksum = 0;
    e.pins = 0;
    e.readers = 0;
    e.state = entry_state::writing;
    e.doomed = false;
    touch_locked(e);
    e.cold.clear();
    std::uint64_t at = lo;
    for (const auto& [offset, size] : hot) {
      if (offset > at)
        e.cold.push_back(extent{at, offset - at});
      at = offset + size;
    }
    if (at < hi)
      e.cold.push_back(extent{at, hi - at});
    e.committed = e.cold.empty();
    used_ += need;
    ++snapshots_;
    if (meta.retained) {
      retained_used_ += need;
      ++retained_snapshots_;
      peak_retained_ = std::max(peak_retained_, retained_used_);
    }
    peak_used_ = std::max(peak_used_, used_);
    peak_snapshots_ = std::max(peak_snapshots_, snapshots_);
    account->second.used += need;
    ++account->second.snapshots;
    out.handle = snapshot_handle{index, e.generation};
    out.bytes = arena_.bytes(lo, bytes);
    add_time(host_.reserve, start);
  }
  release_unlocked(punch);
  return out;
}

// Placement policy (docs/snapshot-store.md, "Eviction"):
//  1. If a free extent fits and the limit, the floors of other models and the
//     cap allow it, take the first fit among warm (committed) runs, else the
//     first fit among all free runs.
//  2. Otherwise walk evictable snapshots from least to most valuable, adding
//     each to a tentative victim set (skipping any that would take another
//     model below its floor), until the budget holds and the victims plus free
//     space hold a contiguous run of `need`. Walking in value order means the
//     most valuable victim is as cheap as it can be.
//  3. Place first-fit in that simulated free space, then drop again, most
//     valuable first, every victim that is neither under the placement nor
//     needed for the budget.
expected<snapshot_store::placement, store_error>
snapshot_store::place_locked(const snapshot_meta& meta, std::uint64_t need) {
  const std::uint32_t model_index = meta.model_index;
  const model_account& own = models_.at(model_index);
  std::uint64_t other_floors = 0;
  std::uint64_t held_for_others = 0; // free bytes other models' floors still claim
  for (const auto& [index, account] : models_) {
    if (index == model_index)
      continue;
    other_floors += account.floor;
    if (account.floor > account.used)
      held_for_others += account.floor - account.used;
  }
  if (own.cap != 0 && need > own.cap)
    return fail(store_errc::too_large, std::to_string(need) + " bytes exceed the cap of model "
                                         + std::to_string(model_index));
  if (need > limit_ - other_floors)
    return fail(store_errc::too_large,
                std::to_string(need) + " bytes exceed the limit less other models' floors");

  const std::uint64_t share = retained_limit_;
  if (meta.retained && need > share)
    return fail(store_errc::too_large,
                std::to_string(need) + " bytes exceed the retained share (" + std::to_string(share)
                  + ")");
  // freed_retained counts only for a retained reservation: it alone is bound
  // by the share, and it may only evict retained snapshots.
  const auto budget_holds = [&](std::uint64_t freed, std::uint64_t freed_own,
                                std::uint64_t freed_retained) {
    return used_ - freed + need + held_for_others <= limit_
           && (own.cap == 0 || own.used - freed_own + need <= own.cap)
           && (!meta.retained || retained_used_ - freed_retained + need <= share);
  };
  const auto direct = first_fit(free_, need);
  if (direct && budget_holds(0, 0, 0)) {
    // A warm run first: the dump then writes committed pages, no fault.
    if (const auto warm = first_fit(warm_, need))
      return placement{*warm, {}};
    return placement{*direct, {}};
  }

  std::vector<std::uint32_t> candidates;
  for (std::uint32_t i = 0; i < entries_.size(); ++i) {
    const entry& e = entries_[i];
    if (e.state == entry_state::sealed && !e.doomed && e.pins == 0 && e.readers == 0
        && (e.meta.retained || !meta.retained))
      candidates.push_back(i);
  }
  // Retained snapshots first, whatever their priority; then by priority,
  // value within the class, last use.
  const auto value = [this](std::uint32_t i) {
    const entry& e = entries_[i];
    return std::make_tuple(!e.meta.retained, e.meta.retained ? 0 : e.meta.priority, e.credit,
                           e.last_use, i);
  };
  std::sort(candidates.begin(), candidates.end(),
            [&](std::uint32_t a, std::uint32_t b) { return value(a) < value(b); });

  free_map simulated = free_;
  std::map<std::uint32_t, std::uint64_t> freed_by_model;
  std::uint64_t freed = 0;
  std::uint64_t freed_own = 0;
  std::uint64_t freed_retained = 0;
  bool hole = direct.has_value();
  bool enough = false;
  std::vector<std::uint32_t> chosen;
  for (const std::uint32_t c : candidates) {
    const entry& e = entries_[c];
    const std::uint32_t m = e.meta.model_index;
    if (m != model_index) {
      const model_account& other = models_.at(m);
      if (other.used - freed_by_model[m] - e.size < other.floor)
        continue;
    }
    chosen.push_back(c);
    freed_by_model[m] += e.size;
    freed += e.size;
    if (m == model_index)
      freed_own += e.size;
    if (e.meta.retained)
      freed_retained += e.size;
    if (insert_free(simulated, extent{e.offset, e.size}) >= need)
      hole = true;
    if (hole && budget_holds(freed, freed_own, freed_retained)) {
      enough = true;
      break;
    }
  }
  if (!enough)
    return fail(store_errc::full,
                "no room for " + std::to_string(need) + " bytes of model "
                  + std::to_string(model_index) + " (used " + std::to_string(used_) + " of "
                  + std::to_string(limit_) + ", model used " + std::to_string(own.used)
                  + ") and not enough evictable snapshots");

  placement p;
  p.offset = direct ? *direct : *first_fit(simulated, need);
  const std::uint64_t lo = p.offset;
  const std::uint64_t hi = lo + need;
  std::vector<bool> keep(chosen.size(), true);
  for (std::size_t i = chosen.size(); i-- > 0;) {
    const entry& e = entries_[chosen[i]];
    if (e.offset < hi && lo < e.offset + e.size)
      continue; // under the placement
    const std::uint64_t own_part = e.meta.model_index == model_index ? e.size : 0;
    const std::uint64_t retained_part = e.meta.retained ? e.size : 0;
    if (budget_holds(freed - e.size, freed_own - own_part, freed_retained - retained_part)) {
      keep[i] = false;
      freed -= e.size;
      freed_own -= own_part;
      freed_retained -= retained_part;
    }
  }
  for (std::size_t i = 0; i < chosen.size(); ++i)
    if (keep[i])
      p.victims.push_back(chosen[i]);
  return p;
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

snapshot_store::extent snapshot_store::detach_locked(std::uint32_t index) {
  entry& e = entries_[index];
  if (e.state != entry_state::on_disk) { // one on disk only holds no bytes of the arena
    model_account& account = models_.at(e.meta.model_index);
    account.used -= e.size;
    --account.snapshots;
    used_ -= e.size;
    --snapshots_;
    if (e.meta.retained) {
      retained_used_ -= e.size;
      --retained_snapshots_;
    }
  }
  if (e.disk_id != 0 && disk_)
    disk_->forget(e.disk_id);
  e.disk_id = 0;
  const extent x{e.state == entry_state::on_disk ? 0 : e.offset,
                 e.state == entry_state::on_disk ? 0 : e.size};
  e.label.reset();
  e.state = entry_state::vacant;
  e.doomed = false;
  e.pins = 0;
  e.readers = 0;
  if (++e.generation == 0) // 0 never names a snapshot
    e.generation = 1;
  vacant_.push_back(index);
  return x;
}

std::uint64_t snapshot_store::committed_prefix(const entry& e) const noexcept {
  // A committed extent is committed whole; otherwise what the writer wrote
  // (it fills the whole reserved span) is, and the rest is treated as cold.
  if (e.committed)
    return e.size;
  return std::min(e.size, round_up(e.length, page_size()));
}

void snapshot_store::retire_locked(std::uint32_t index, std::vector<extent>& punch) {
  const std::uint64_t prefix = committed_prefix(entries_[index]);
  recycle_locked(detach_locked(index), prefix, punch);
}

// Warm pool policy (docs/snapshot-store.md, "The warm pool"): a freed range
// stays committed and rejoins the free map at once while the pool is under its
// target; what is above the target (or was never committed) is punched outside
// the lock and rejoins the free map after.
void snapshot_store::recycle_locked(extent x, std::uint64_t committed, std::vector<extent>& punch) {
  const std::uint64_t room = warm_target_ > warm_bytes_ ? warm_target_ - warm_bytes_ : 0;
  const std::uint64_t keep = std::min(committed, room) / granularity_ * granularity_;
  if (keep > 0) {
    insert_free(free_, extent{x.offset, keep});
    insert_free(warm_, extent{x.offset, keep});
    warm_bytes_ += keep;
  }
  if (keep < x.size)
    punch.push_back(extent{x.offset + keep, x.size - keep});
}

std::uint64_t snapshot_store::remove_range(free_map& map, extent x) {
  const std::uint64_t lo = x.offset;
  const std::uint64_t hi = x.offset + x.size;
  std::uint64_t removed = 0;
  auto it = map.upper_bound(lo);
  if (it != map.begin())
    --it;
  while (it != map.end() && it->first < hi) {
    const std::uint64_t start = it->first;
    const std::uint64_t end = it->first + it->second;
    if (end <= lo) {
      ++it;
      continue;
    }
    it = map.erase(it);
    if (start < lo)
      map.emplace(start, lo - start);
    if (end > hi)
      map.emplace(hi, end - hi);
    removed += std::min(end, hi) - std::max(start, lo);
  }
  return removed;
}

void snapshot_store::end_read_locked(std::uint32_t index, std::vector<extent>& released) {
  entry& e = entries_[index];
  --e.readers;
  if (e.doomed && e.pins == 0 && e.readers == 0)
    retire_locked(index, released);
}

void snapshot_store::carve_locked(std::uint64_t offset, std::uint64_t size) {
  auto it = free_.upper_bound(offset);
  assert(it != free_.begin());
  --it;
  const std::uint64_t start = it->first;
  const std::uint64_t end = it->first + it->second;
  assert(start <= offset && offset + size <= end);
  free_.erase(it);
  if (offset > start)
    free_.emplace(start, offset - start);
  if (offset + size < end)
    free_.emplace(offset + size, end - offset - size);
}

// Punching happens without the lock (it takes milliseconds for tens of MiB);
// the ranges are in nobody's hands meanwhile, and rejoin the free map only after,
// so no new snapshot can be handed pages that are about to vanish.
void snapshot_store::release_unlocked(const std::vector<extent>& ranges) {
  if (ranges.empty())
    return;
  const auto start = clock::now();
  std::uint64_t failures = 0;
  std::uint64_t bytes = 0;
  for (const extent& x : ranges) {
    bytes += x.size;
    if (auto r = arena_.release(x.offset, x.size); !r) {
      ++failures;
      logging::get("store")->error("returning {} bytes at offset {} to the OS failed: {}",
                                           x.size, x.offset, r.error().message);
    }
  }
  std::lock_guard lock(mutex_);
  add_time(host_.punch, start);
  host_.punched_bytes += bytes;
  release_failures_ += failures;
  for (const extent& x : ranges)
    insert_free(free_, x);
}

std::uint64_t snapshot_store::insert_free(free_map& map, extent x) {
  std::uint64_t offset = x.offset;
  std::uint64_t size = x.size;
  auto next = map.lower_bound(offset);
  if (next != map.begin()) {
    const auto prev = std::prev(next);
    assert(prev->first + prev->second <= offset);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      map.erase(prev);
    }
  }
  assert(next == map.end() || offset + size <= next->first);
  if (next != map.end() && offset + size == next->first) {
    size += next->second;
    map.erase(next);
  }
  map.emplace(offset, size);
  return size;
}

std::optional<std::uint64_t> snapshot_store::first_fit(const free_map& map, std::uint64_t need) {
  for (const auto& [offset, size] : map)
    if (size >= need)
      return offset;
  return std::nullopt;
}

} // namespace kvlane::ipc
