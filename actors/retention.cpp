#include "actors/retention.hpp"

#include <algorithm>

namespace kvlane::actors {

retention::retention(std::uint32_t block_tokens, std::uint32_t min_prefix)
  : index_(block_tokens), min_prefix_(std::max(min_prefix, index_.block_tokens())) {}

void retention::set_min_prefix(std::uint32_t tokens) noexcept {
  min_prefix_ = std::max(tokens, index_.block_tokens());
}

std::optional<retained_id> retention::retain(prefix_scope scope,
                                             std::span<const backends::token_id> tokens,
                                             backends::slot_id slot, retained_origin origin,
                                             std::chrono::steady_clock::time_point now,
                                             std::vector<superseded>& dropped) {
  if (tokens.size() < min_prefix_)
    return std::nullopt;
  const retained_id id = insert(scope, tokens, std::move(origin), now, dropped);
  entries_.at(id).slot = slot;
  return id;
}

std::optional<retained_id> retention::adopt(prefix_scope scope,
                                            std::span<const backends::token_id> tokens,
                                            ipc::snapshot_handle snapshot, retained_origin origin,
                                            std::chrono::steady_clock::time_point now,
                                            std::vector<superseded>& dropped) {
  if (tokens.size() < min_prefix_)
    return std::nullopt;
  const retained_id id = insert(scope, tokens, std::move(origin), now, dropped);
  entries_.at(id).snapshot = snapshot;
  by_snapshot_[snapshot_key(snapshot)] = id;
  return id;
}

retained_id retention::insert(prefix_scope scope, std::span<const backends::token_id> tokens,
                              retained_origin origin, std::chrono::steady_clock::time_point now,
                              std::vector<superseded>& dropped) {
  // Every older entry of the scope that is a prefix of the new one is
  // dominated: each lookup the old one answers, the new one answers at least
  // as long. Repeated lookups peel them off from the longest down.
  for (;;) {
    const auto m = index_.longest_match(scope, tokens, static_cast<std::uint32_t>(tokens.size()));
    if (!m || m->length != index_.tokens(m->entry).size())
      break;
    auto old = erase(m->entry);
    dropped.push_back(superseded{old->id, old->slot, old->snapshot, old->dumping});
  }
  const retained_id id = next_id_++;
  index_.insert(id, scope, tokens);
  retained_entry e;
  e.id = id;
  e.scope = scope;
  e.origin = std::move(origin);
  e.kv_len = static_cast<std::uint32_t>(tokens.size());
  e.last_use = now;
  entries_.emplace(id, std::move(e));
  by_use_.emplace(now, id);
  return id;
}

std::optional<retained_match> retention::match(prefix_scope scope,
                                               std::span<const backends::token_id> prompt,
                                               std::uint32_t max_length) const {
  const auto m = index_.longest_match(scope, prompt, max_length);
  if (!m || m->length < min_prefix_)
    return std::nullopt;
  const auto& e = entries_.at(m->entry);
  retained_match out;
  out.entry = e.id;
  out.length = m->length;
  if (e.slot && !e.dumping)
    out.slot = e.slot;
  if (e.snapshot) {
    out.snapshot = e.snapshot;
    out.snapshot_len = e.kv_len;
  }
  if (!out.slot && !out.snapshot)
    return std::nullopt; // only a dump in flight: nothing to take yet
  return out;
}

void retention::use(retained_id id, std::chrono::steady_clock::time_point now) {
  if (const auto it = entries_.find(id); it != entries_.end()) {
    ++it->second.hits;
    by_use_.erase({it->second.last_use, id});
    it->second.last_use = now;
    by_use_.emplace(now, id);
  }
}

void retention::slot_released(retained_id id) {
  const auto it = entries_.find(id);
  if (it == entries_.end())
    return;
  it->second.slot.reset();
  it->second.dumping = false;
  drop_if_empty(id);
}

void retention::dump_started(retained_id id) {
  if (const auto it = entries_.find(id); it != entries_.end())
    it->second.dumping = true;
}

bool retention::dump_finished(retained_id id, std::optional<ipc::snapshot_handle> snapshot) {
  const auto it = entries_.find(id);
  if (it == entries_.end())
    return false;
  it->second.dumping = false;
  it->second.slot.reset();
  if (snapshot) {
    if (it->second.snapshot)
      by_snapshot_.erase(snapshot_key(*it->second.snapshot));
    it->second.snapshot = snapshot;
    by_snapshot_[snapshot_key(*snapshot)] = id;
  }
  drop_if_empty(id);
  return true;
}

void retention::snapshot_lost(retained_id id) {
  const auto it = entries_.find(id);
  if (it == entries_.end())
    return;
  if (it->second.snapshot)
    by_snapshot_.erase(snapshot_key(*it->second.snapshot));
  it->second.snapshot.reset();
  drop_if_empty(id);
}

std::optional<retained_entry> retention::erase(retained_id id) {
  const auto it = entries_.find(id);
  if (it == entries_.end())
    return std::nullopt;
  retained_entry e = std::move(it->second);
  entries_.erase(it);
  index_.erase(id);
  by_use_.erase({e.last_use, id});
  if (e.snapshot)
    by_snapshot_.erase(snapshot_key(*e.snapshot));
  return e;
}

std::optional<retained_id> retention::coldest_warm() const {
  // Warm entries are at most one per slot; the walk passes only colder
  // entries that are stored or being dumped.
  for (const auto& [t, id] : by_use_)
    if (const auto& e = entries_.at(id); e.slot && !e.dumping)
      return id;
  return std::nullopt;
}

std::optional<std::chrono::steady_clock::time_point> retention::oldest_use() const {
  if (by_use_.empty())
    return std::nullopt;
  return by_use_.begin()->first;
}

std::vector<retained_id> retention::idle_since(std::chrono::steady_clock::time_point now,
                                               std::chrono::milliseconds ttl) const {
  std::vector<retained_id> out;
  if (ttl.count() <= 0)
    return out;
  for (const auto& [t, id] : by_use_) {
    if (now - t <= ttl)
      break;
    out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<retained_id> retention::by_snapshot(ipc::snapshot_handle h) const {
  if (const auto it = by_snapshot_.find(snapshot_key(h)); it != by_snapshot_.end())
    return it->second;
  return std::nullopt;
}

const retained_entry* retention::find(retained_id id) const {
  const auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<retained_id> retention::ids() const {
  std::vector<retained_id> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_)
    out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

void retention::drop_if_empty(retained_id id) {
  const auto it = entries_.find(id);
  if (it != entries_.end() && !it->second.slot && !it->second.snapshot && !it->second.dumping)
    erase(id);
}

} // namespace kvlane::actors
