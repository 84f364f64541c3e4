// snapshot_store: what carries the store across a daemon restart — the index
// of the retained snapshots (snapshot_index) and taking them back from an
// adopted arena (recover, claim). docs/snapshot-store.md, "Across a restart".

#include "ipc/snapshot_store.hpp"

#include "ipc/snapshot_store_detail.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace kvlane::ipc {

using store_detail::fail;

expected<index_contents, store_error> snapshot_store::snapshot_index() const {
  auto inode = arena_.inode();
  if (!inode)
    return unexpected(std::move(inode).error());
  index_contents out;
  out.arena_bytes = capacity_;
  out.arena_inode = *inode;
  out.granularity = granularity_;
  std::lock_guard lock(mutex_);
  for (const entry& e : entries_) {
    if (e.state != entry_state::sealed || e.doomed || !e.label)
      continue;
    index_record r;
    r.offset = e.offset;
    r.length = e.length;
    r.size = e.size;
    r.checksum = e.checksum;
    r.seed = e.seed;
    r.cache_len = e.meta.cache_len;
    r.label = *e.label;
    if (r.label.model.empty())
      r.label.model = models_.at(e.meta.model_index).name;
    out.records.push_back(std::move(r));
  }
  return out;
}

expected<recovery_result, store_error> snapshot_store::recover(const index_contents& index) {
  auto inode = arena_.inode();
  if (!inode)
    return unexpected(std::move(inode).error());
  std::lock_guard lock(mutex_);
  if (snapshots_ != 0 || !pending_.empty())
    return fail(store_errc::invalid_argument, "recover() must come before any reservation");
  if (index.arena_inode != *inode || index.arena_bytes != capacity_
      || index.granularity != granularity_) {
    ++discarded_[static_cast<std::size_t>(discard_reason::arena_changed)];
    return fail(store_errc::invalid_argument,
                "the index describes another arena (" + std::to_string(index.arena_bytes)
                  + " bytes, inode " + std::to_string(index.arena_inode) + ", granularity "
                  + std::to_string(index.granularity) + "); this one has "
                  + std::to_string(capacity_) + " bytes, inode " + std::to_string(*inode)
                  + ", granularity " + std::to_string(granularity_));
  }
  recovery_result out;
  // A prefaulted pool overlaps the recovered extents: the pool starts over.
  warm_.clear();
  warm_bytes_ = 0;
  for (const auto& r : index.records) {
    // decode_index checked that the extents lie in the arena and do not overlap.
    const std::uint64_t removed = remove_range(free_, extent{r.offset, r.size});
    if (removed != r.size)
      return fail(store_errc::invalid_argument, "recovered extents overlap");
    out.bytes += r.size;
  }
  pending_ = index.records;
  out.records = pending_.size();
  // What no record holds is stale KV of freed snapshots: its pages go back to
  // the OS, so committed bytes are again the live snapshots (plus the pool).
  for (const auto& [offset, size] : free_) {
    if (auto r = arena_.release(offset, size); !r)
      ++release_failures_;
    else
      out.punched_bytes += size;
  }
  return out;
}

std::size_t snapshot_store::claim(std::uint32_t model_index, std::string_view model) {
  std::vector<extent> punch;
  std::size_t taken = 0;
  {
    std::lock_guard lock(mutex_);
    const kv_fingerprint* loaded = loaded_fingerprint_locked(model_index);
    if (loaded == nullptr)
      return 0;
    model_account& account = models_.at(model_index);
    std::vector<index_record> others;
    for (auto& r : pending_) {
      if (r.label.model != model) {
        others.push_back(std::move(r));
        continue;
      }
      if (const auto why = fingerprint_mismatch(r.label.fingerprint, *loaded)) {
        ++discarded_[static_cast<std::size_t>(*why)];
        recycle_locked(extent{r.offset, r.size}, r.size, punch);
        continue;
      }
      const auto index = adopt_locked(model_index, r.cache_len, std::move(r.label), r.seed,
                                      r.checksum, r.length, extent{r.offset, r.size},
                                      entry_state::sealed);
      charge_locked(entries_[index], account);
      ++taken;
    }
    pending_ = std::move(others);
    const std::size_t before = claimed_[model_index].size();
    claim_disk_locked(model_index, model, *loaded);
    taken += claimed_[model_index].size() - before;
  }
  release_unlocked(punch);
  return taken;
}

const kv_fingerprint*
snapshot_store::loaded_fingerprint_locked(std::uint32_t model_index) const {
  const auto account = models_.find(model_index);
  if (account == models_.end() || !account->second.fingerprint)
    return nullptr;
  return &*account->second.fingerprint;
}

std::uint32_t snapshot_store::adopt_locked(std::uint32_t model_index, std::uint32_t cache_len,
                                           snapshot_label label, std::uint64_t seed,
                                           std::uint64_t checksum, std::uint64_t length,
                                           extent x, entry_state state) {
  const std::uint32_t index = new_entry_locked();
  entry& e = entries_[index];
  e.meta = snapshot_meta{};
  e.meta.model_index = model_index;
  e.meta.cache_len = cache_len;
  e.meta.generation = 1;
  e.meta.retained = true;
  e.label = std::make_shared<const snapshot_label>(std::move(label));
  e.seed = seed;
  e.checksum = checksum;
  e.offset = x.offset;
  e.size = x.size;
  e.length = length;
  e.pins = 0;
  e.readers = 0;
  e.state = state;
  e.doomed = false;
  e.committed = false; // what its writer wrote is committed (committed_prefix)
  e.cold.clear();
  e.disk_id = 0;
  touch_locked(e);
  ++restored_;
  claimed_[model_index].push_back(
    restored_snapshot{snapshot_handle{index, e.generation}, e.label, e.meta.cache_len});
  return index;
}

std::size_t snapshot_store::discard_unclaimed() {
  std::vector<extent> punch;
  std::size_t n = 0;
  {
    std::lock_guard lock(mutex_);
    for (const auto& r : pending_)
      recycle_locked(extent{r.offset, r.size}, r.size, punch);
    n = pending_.size();
    for (const auto& d : disk_pending_)
      if (disk_)
        disk_->forget(d.id);
    n += disk_pending_.size();
    disk_pending_.clear();
    discarded_[static_cast<std::size_t>(discard_reason::unknown_model)] += n;
    pending_.clear();
  }
  release_unlocked(punch);
  return n;
}

std::vector<restored_snapshot> snapshot_store::take_restored(std::uint32_t model_index) {
  std::lock_guard lock(mutex_);
  const auto it = claimed_.find(model_index);
  if (it == claimed_.end())
    return {};
  auto out = std::move(it->second);
  claimed_.erase(it);
  return out;
}

void snapshot_store::attach_index(index_file file) {
  std::lock_guard lock(mutex_);
  index_file_.emplace(std::move(file));
}

int snapshot_store::index_fd() const noexcept {
  std::lock_guard lock(mutex_);
  return index_file_ ? index_file_->fd() : -1;
}

expected<std::size_t, store_error> snapshot_store::persist() {
  auto contents = snapshot_index();
  if (!contents)
    return unexpected(std::move(contents).error());
  std::lock_guard lock(mutex_);
  if (!index_file_)
    return fail(store_errc::invalid_argument, "no index file is attached");
  if (auto r = index_file_->write(*contents); !r)
    return unexpected(std::move(r).error());
  return contents->records.size();
}

} // namespace kvlane::ipc
