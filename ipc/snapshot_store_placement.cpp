// snapshot_store: where a new snapshot goes — reserve() places it in free
// space or evicts the least valuable snapshots for it, within the store's
// limit, its retained share and every model's floor and cap.
// docs/snapshot-store.md, "Eviction".

#include "ipc/snapshot_store.hpp"

#include "common/align.hpp"
#include "ipc/snapshot_store_detail.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace kvlane::ipc {

using store_detail::add_time;
using store_detail::clock;
using store_detail::fail;
using store_detail::meta_seed;

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
    charge_locked(e, account->second);
    out.handle = snapshot_handle{index, e.generation};
    out.bytes = arena_.bytes(lo, bytes);
    add_time(host_.reserve, start);
  }
  release_unlocked(punch);
  return out;
}

void snapshot_store::charge_locked(const entry& e, model_account& account) {
  used_ += e.size;
  ++snapshots_;
  if (e.meta.retained) {
    retained_used_ += e.size;
    ++retained_snapshots_;
    peak_retained_ = std::max(peak_retained_, retained_used_);
  }
  peak_used_ = std::max(peak_used_, used_);
  peak_snapshots_ = std::max(peak_snapshots_, snapshots_);
  account.used += e.size;
  ++account.snapshots;
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

} // namespace kvlane::ipc
