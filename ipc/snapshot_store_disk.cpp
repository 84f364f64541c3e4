// snapshot_store: the disk tier's side of the store — which snapshots have a
// copy on disk, evictions that keep the copy (memory -> disk), reading one
// back before a load, and the entries an earlier daemon left on disk.
// docs/snapshot-store.md, "Disk tier".

#include "ipc/snapshot_store.hpp"

#include "common/logging.hpp"
#include "ipc/snapshot_store_detail.hpp"

#include <string>
#include <utility>

namespace kvlane::ipc {

using store_detail::fail;
using store_detail::stale;

std::string_view to_string(snapshot_tier t) noexcept {
  switch (t) {
    case snapshot_tier::memory: return "memory";
    case snapshot_tier::disk: return "disk";
    case snapshot_tier::both: return "both";
  }
  return "unknown";
}

void snapshot_store::attach_disk(std::shared_ptr<disk_backing> disk) {
  std::lock_guard lock(mutex_);
  disk_ = std::move(disk);
}

void snapshot_store::add_disk_entries(std::vector<disk_entry> entries) {
  std::lock_guard lock(mutex_);
  for (auto& e : entries)
    disk_pending_.push_back(std::move(e));
}

expected<snapshot_tier, store_error> snapshot_store::tier(snapshot_handle h) const {
  std::lock_guard lock(mutex_);
  const entry* e = find_locked(h);
  if (e == nullptr)
    return stale(h);
  if (e->state == entry_state::on_disk)
    return snapshot_tier::disk;
  return e->disk_id != 0 ? snapshot_tier::both : snapshot_tier::memory;
}

disk_entry snapshot_store::disk_entry_locked(const entry& e) const {
  disk_entry out;
  out.id = e.disk_id;
  out.length = e.length;
  out.checksum = e.checksum;
  out.seed = e.seed;
  out.cache_len = e.meta.cache_len;
  out.label = *e.label;
  if (out.label.model.empty())
    out.label.model = models_.at(e.meta.model_index).name;
  return out;
}

expected<write_back, store_error> snapshot_store::begin_write_back(snapshot_handle h) {
  std::lock_guard lock(mutex_);
  entry* e = find_locked(h);
  if (e == nullptr)
    return stale(h);
  if (e->state != entry_state::sealed || !e->meta.retained || !e->label)
    return fail(store_errc::invalid_argument,
                "snapshot " + to_string(h) + " is not a sealed retained snapshot in memory");
  if (e->disk_id != 0)
    return fail(store_errc::invalid_argument, "snapshot " + to_string(h) + " is on disk already");
  ++e->pins; // not evicted while its bytes are copied out
  return write_back{disk_entry_locked(*e), arena_.bytes(e->offset, e->length)};
}

bool snapshot_store::end_write_back(snapshot_handle h, std::optional<std::uint64_t> disk_id) {
  bool alive = false;
  {
    std::lock_guard lock(mutex_);
    if (entry* e = find_locked(h)) {
      alive = true;
      if (disk_id)
        e->disk_id = *disk_id;
    }
  }
  (void)unpin(h);
  return alive;
}

bool snapshot_store::disk_evicted(std::uint64_t disk_id) {
  std::vector<extent> released;
  {
    std::lock_guard lock(mutex_);
    for (auto it = disk_pending_.begin(); it != disk_pending_.end(); ++it)
      if (it->id == disk_id) {
        disk_pending_.erase(it);
        return true;
      }
    for (std::uint32_t i = 0; i < entries_.size(); ++i) {
      entry& e = entries_[i];
      if (e.state == entry_state::vacant || e.disk_id != disk_id)
        continue;
      if (e.state == entry_state::on_disk) {
        if (e.pins > 0 || e.readers > 0)
          return false; // a load reads it back now
        e.disk_id = 0;  // the caller deletes the file
        retire_locked(i, released);
      } else {
        e.disk_id = 0;
      }
      break;
    }
  }
  release_unlocked(released);
  return true;
}

snapshot_store::extent snapshot_store::demote_locked(std::uint32_t index) {
  entry& e = entries_[index];
  model_account& account = models_.at(e.meta.model_index);
  account.used -= e.size;
  --account.snapshots;
  used_ -= e.size;
  --snapshots_;
  retained_used_ -= e.size;
  --retained_snapshots_;
  const extent x{e.offset, e.size};
  e.state = entry_state::on_disk;
  e.offset = 0;
  e.size = 0;
  e.committed = false;
  e.cold.clear();
  ++disk_demotions_;
  return x;
}

// Reads a snapshot that lives on disk only back into the arena: a retained
// reservation (it may evict retained snapshots, never parked ones), the
// file's bytes into it, then its extent becomes the snapshot's. True when the
// bytes came from disk; the caller (verify) then checks them against the seal.
expected<bool, store_error> snapshot_store::fetch_from_disk(snapshot_handle h) {
  disk_entry want;
  snapshot_meta meta;
  std::shared_ptr<disk_backing> disk;
  {
    std::lock_guard lock(mutex_);
    entry* e = find_locked(h);
    if (e == nullptr)
      return stale(h);
    if (e->state != entry_state::on_disk)
      return false;
    if (!disk_)
      return fail(store_errc::invalid_argument,
                  "snapshot " + to_string(h) + " is on disk and no disk tier is attached");
    want = disk_entry_locked(*e);
    meta = e->meta;
    disk = disk_;
  }
  auto r = reserve(meta, want.length);
  if (!r)
    return unexpected(store_error{r.error().code, "reading snapshot " + to_string(h)
                                                    + " back from disk: " + r.error().message});
  (void)commit(r->handle); // a failure here only means the read faults its pages in
  if (auto read = disk->fetch(want, r->bytes); !read) {
    (void)free(r->handle);
    count_discard(discard_reason::disk_corrupt);
    (void)free(h); // its file goes with it (forget)
    logging::get("store")->warn("snapshot {}: disk copy {} unusable, deleted: {}", to_string(h),
                                want.id, read.error());
    return fail(store_errc::corrupt,
                "snapshot " + to_string(h) + ": its disk copy is unusable: " + read.error());
  }
  bool installed = false;
  bool gone = false;
  {
    std::lock_guard lock(mutex_);
    entry* e = find_locked(h);
    gone = e == nullptr;
    if (e != nullptr && e->state == entry_state::on_disk) {
      const std::uint32_t ti = r->handle.index;
      entry& t = entries_[ti];
      // The reservation's extent and accounting become the snapshot's.
      e->offset = t.offset;
      e->size = t.size;
      e->committed = t.committed;
      e->cold = std::move(t.cold);
      e->state = entry_state::sealed;
      touch_locked(*e);
      t.cold.clear();
      t.label.reset();
      t.state = entry_state::vacant;
      if (++t.generation == 0)
        t.generation = 1;
      vacant_.push_back(ti);
      ++disk_fetches_;
      disk_fetch_bytes_ += want.length;
      installed = true;
    }
  }
  if (!installed) {
    (void)free(r->handle); // freed meanwhile, or another load read it back first
    if (gone)
      return stale(h);
  }
  return installed;
}

void snapshot_store::claim_disk_locked(std::uint32_t model_index, std::string_view model,
                                       const kv_fingerprint& loaded) {
  std::vector<disk_entry> others;
  for (auto& d : disk_pending_) {
    if (d.label.model != model) {
      others.push_back(std::move(d));
      continue;
    }
    if (const auto why = fingerprint_mismatch(d.label.fingerprint, loaded)) {
      ++discarded_[static_cast<std::size_t>(*why)];
      if (disk_)
        disk_->forget(d.id);
      continue;
    }
    // The same snapshot came back in the arena too: this is its copy.
    bool linked = false;
    for (entry& e : entries_)
      if (e.state == entry_state::sealed && e.meta.retained && e.meta.model_index == model_index
          && e.disk_id == 0 && e.checksum == d.checksum && e.seed == d.seed
          && e.length == d.length) {
        e.disk_id = d.id;
        linked = true;
        break;
      }
    if (linked)
      continue;
    const auto index = adopt_locked(model_index, d.cache_len, std::move(d.label), d.seed,
                                    d.checksum, d.length, extent{}, entry_state::on_disk);
    entries_[index].disk_id = d.id;
  }
  disk_pending_ = std::move(others);
  // Snapshots taken back from the arena without a copy on disk get one.
  if (disk_)
    for (const auto& r : claimed_[model_index])
      if (entries_[r.handle.index].state == entry_state::sealed
          && entries_[r.handle.index].disk_id == 0)
        disk_->sealed(r.handle);
}

} // namespace kvlane::ipc
