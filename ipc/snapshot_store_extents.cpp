// snapshot_store: the arena's extents — the free map and the warm pool
// (committed free pages kept for the next reservation), detaching a
// snapshot's extent, and returning pages to the OS outside the lock.
// docs/snapshot-store.md, "The arena: elastic memory" and "The warm pool".

#include "ipc/snapshot_store.hpp"

#include "common/align.hpp"
#include "common/logging.hpp"
#include "ipc/snapshot_store_detail.hpp"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <vector>

namespace kvlane::ipc {

using store_detail::add_time;
using store_detail::clock;

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
