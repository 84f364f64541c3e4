// snapshot_store: what carries a model's retained KV across its unload and
// next load in the same daemon (docs/snapshot-store.md, "Across a model's
// unload"). The snapshots never leave the arena: while the model is unloaded
// they stay sealed and evictable like any other; at the next load they go
// back to the model's keeper through the same hand-over as a restart's
// (take_restored), checked against the fingerprint again.

#include "ipc/snapshot_store.hpp"

#include <algorithm>

namespace kvlane::ipc {

std::size_t snapshot_store::reclaim_unloaded(std::uint32_t model_index, std::string_view model) {
  std::vector<extent> punch;
  std::size_t taken = 0;
  {
    std::lock_guard lock(mutex_);
    const kv_fingerprint* loaded = loaded_fingerprint_locked(model_index);
    if (loaded == nullptr)
      return 0;
    auto& out = claimed_[model_index];
    for (std::uint32_t index = 0; index < entries_.size(); ++index) {
      entry& e = entries_[index];
      // (on_disk: demoted to the disk tier meanwhile; a load reads it back.)
      const bool readable = e.state == entry_state::sealed || e.state == entry_state::on_disk;
      if (!readable || e.doomed || !e.label || !e.meta.retained
          || e.meta.model_index != model_index)
        continue;
      const snapshot_handle h{index, e.generation};
      if (std::any_of(out.begin(), out.end(), [&](const restored_snapshot& r) {
            return r.handle.index == h.index && r.handle.generation == h.generation;
          }))
        continue; // claimed already, not taken yet
      std::optional<discard_reason> why;
      // (A label made in this daemon names no model: its index is the model's.)
      if (!e.label->model.empty() && e.label->model != model)
        why = discard_reason::unknown_model;
      else
        why = fingerprint_mismatch(e.label->fingerprint, *loaded);
      if (why) {
        ++discarded_[static_cast<std::size_t>(*why)];
        if (e.pins > 0 || e.readers > 0)
          e.doomed = true;
        else
          retire_locked(index, punch);
        continue;
      }
      out.push_back(restored_snapshot{h, e.label, e.meta.cache_len});
      ++taken;
    }
    if (out.empty())
      claimed_.erase(model_index);
  }
  release_unlocked(punch);
  return taken;
}

std::size_t snapshot_store::discard_pending_except(const std::vector<std::string>& keep) {
  std::vector<extent> punch;
  std::size_t n = 0;
  {
    std::lock_guard lock(mutex_);
    std::vector<index_record> kept;
    for (auto& r : pending_) {
      if (std::find(keep.begin(), keep.end(), r.label.model) != keep.end()) {
        kept.push_back(std::move(r));
        continue;
      }
      recycle_locked(extent{r.offset, r.size}, r.size, punch);
      ++n;
    }
    discarded_[static_cast<std::size_t>(discard_reason::unknown_model)] += n;
    pending_ = std::move(kept);
  }
  release_unlocked(punch);
  return n;
}

} // namespace kvlane::ipc
