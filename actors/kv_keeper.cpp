#include "actors/kv_keeper.hpp"

#include <algorithm>
#include <string_view>

namespace kvlane::actors {

std::optional<std::uint64_t> reuse_head_of(std::span<const token_id> tokens) noexcept {
  if (tokens.size() < reuse_block_tokens)
    return std::nullopt;
  return std::hash<std::string_view>{}(
    {reinterpret_cast<const char*>(tokens.data()), reuse_block_tokens * sizeof(token_id)});
}

kv_keeper::kv_keeper(kv_keeper_setup setup, const reuse_policy& reuse)
  : setup_(std::move(setup)),
    fingerprint_(setup_.store->fingerprint(setup_.model_index).value_or(ipc::kv_fingerprint{})),
    reuse_(reuse), retained_(reuse_block_tokens, 1), warm_(setup_.slots) {
  retained_.set_min_prefix(reuse.min_prefix_tokens);
}

std::size_t kv_keeper::adopt_restored(time_point now) {
  std::size_t taken = 0;
  for (const auto& r : setup_.store->take_restored(setup_.model_index)) {
    const auto& label = *r.label;
    if (const auto why = ipc::fingerprint_mismatch(label.fingerprint, fingerprint_)) {
      refuse(r.handle, *why);
      continue;
    }
    if (label.tokens.size() != r.cache_len) {
      refuse(r.handle, ipc::discard_reason::tokens_mismatch);
      continue;
    }
    if (reuse_.mode != reuse_mode::store) {
      (void)setup_.store->free(r.handle);
      continue;
    }
    std::vector<superseded> dropped;
    const auto id = retained_.adopt(scope_of(label.user), label.tokens, r.handle,
                                    {label.user, label.session}, now, dropped);
    for (const auto& d : dropped)
      discard(d.slot, d.snapshot, d.dumping);
    counters_.retained_superseded += dropped.size();
    if (!id) {
      (void)setup_.store->free(r.handle); // shorter than the minimum prefix now
      continue;
    }
    ++taken;
  }
  counters_.retained_restored += taken;
  return taken;
}

// A stored entry is used only when its snapshot's label carries the loaded
// model's fingerprint and its tokens are the prompt's, token for token, over
// the matched length (the index matched the entry's own copy of them).
bool kv_keeper::usable(const retained_match& m, std::span<const token_id> prompt) {
  const auto label = setup_.store->label(*m.snapshot);
  if (!label) {
    forget_retained_snapshot(*m.snapshot);
    return false;
  }
  if (!*label)
    return true; // an unlabelled snapshot was made in this run by this keeper
  if (const auto why = ipc::fingerprint_mismatch((*label)->fingerprint, fingerprint_)) {
    refuse(*m.snapshot, *why);
    return false;
  }
  const auto& recorded = (*label)->tokens;
  if (recorded.size() < m.length || prompt.size() < m.length
      || !std::equal(prompt.begin(), prompt.begin() + m.length, recorded.begin())) {
    refuse(*m.snapshot, ipc::discard_reason::tokens_mismatch);
    return false;
  }
  return true;
}

void kv_keeper::refuse(ipc::snapshot_handle h, ipc::discard_reason why) {
  setup_.store->count_discard(why);
  ++counters_.retained_discarded;
  if (retained_.by_snapshot(h))
    forget_retained_snapshot(h);
  else
    (void)setup_.store->free(h);
}

void kv_keeper::set_reuse(const reuse_policy& p) {
  reuse_ = p;
  if (!setup_.snapshots && p.mode == reuse_mode::store)
    reuse_.mode = reuse_mode::slot;
  retained_.set_min_prefix(p.min_prefix_tokens);
  if (p.mode == reuse_mode::off)
    drop_all();
  // A shorter TTL may be due sooner than the armed timer.
  expiry_due_.reset();
}

prefix_scope kv_keeper::scope_of(std::uint64_t owner) const {
  return {setup_.model_identity, reuse_.scope == reuse_scope::all ? shared_owner : owner};
}

void kv_keeper::set_warm(slot_id slot, std::optional<retained_id> id) {
  warm_count_ -= warm_[slot].has_value();
  warm_[slot] = id;
  warm_count_ += id.has_value();
}

// -- retained KV -------------------------------------------------------------------

bool kv_keeper::retain(std::uint64_t owner, const std::string& session,
                       std::span<const token_id> tokens, slot_id slot, time_point now) {
  if (reuse_.mode == reuse_mode::off)
    return false;
  std::vector<superseded> dropped;
  const auto id = retained_.retain(scope_of(owner), tokens, slot, {owner, session}, now, dropped);
  for (const auto& d : dropped)
    discard(d.slot, d.snapshot, d.dumping);
  counters_.retained_superseded += dropped.size();
  if (!id)
    return false;
  set_warm(slot, *id);
  return true;
}

std::optional<retained_match> kv_keeper::find_reusable(std::uint64_t owner,
                                                       std::span<const token_id> tokens) const {
  if (reuse_.mode == reuse_mode::off || tokens.size() < 2)
    return std::nullopt;
  // The last prompt token is always prefilled: its logits give the next token.
  return retained_.match(scope_of(owner), tokens, static_cast<std::uint32_t>(tokens.size() - 1));
}

slot_id kv_keeper::take_warm(const retained_match& m, time_point now) {
  const slot_id slot = *m.slot;
  retained_.use(m.entry, now);
  set_warm(slot, std::nullopt);
  retained_.slot_released(m.entry);
  ++counters_.reuse_hits;
  ++counters_.reuse_warm_hits;
  counters_.reused_tokens += m.length;
  return slot;
}

reuse_start kv_keeper::start_from_retained(seq_id id, std::uint64_t owner,
                                           std::span<const token_id> tokens, slot_id slot,
                                           const cost_model& costs, time_point now) {
  reuse_start out;
  out.slot = slot;
  const auto m = find_reusable(owner, tokens);
  if (!m)
    return out;
  if (m->slot) {
    out.how = reuse_start::kind::warm;
    out.slot = take_warm(*m, now);
    out.length = m->length;
    return out;
  }
  if (!m->snapshot || reuse_.mode != reuse_mode::store || !usable(*m, tokens))
    return out;
  // The dump is paid already: only the load counts against the prefill.
  if (costs.prefer_recompute(m->length, snapshot_size(m->snapshot_len), false)) {
    ++counters_.reuse_recomputed;
    return out;
  }
  if (!setup_.store->pin(*m->snapshot)) {
    forget_retained_snapshot(*m->snapshot);
    return out;
  }
  retained_.use(m->entry, now);
  auto job = std::make_shared<transfer_job>();
  job->kind = transfer_kind::load;
  job->seq = id;
  job->slot = slot;
  job->cache_len = m->snapshot_len;
  job->bytes = snapshot_size(job->cache_len);
  job->generation = 1;
  job->snapshot = *m->snapshot;
  job->keep_snapshot = true;
  out.how = reuse_start::kind::load;
  out.length = m->length;
  out.jobs.transfers.push_back(std::move(job));
  return out;
}

std::vector<std::uint64_t> kv_keeper::warm_heads() const {
  std::vector<std::uint64_t> heads;
  for (const auto& w : warm_)
    if (w)
      if (auto h = reuse_head_of(retained_.tokens(*w)))
        heads.push_back(*h);
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}

kv_jobs kv_keeper::reclaim_warm(std::uint32_t wanted, std::uint32_t free, std::uint32_t promised,
                                lane_backlog backlog, const cost_model& costs) {
  kv_jobs jobs;
  while (free + promised < wanted) {
    const auto coldest = retained_.coldest_warm();
    if (!coldest)
      break;
    if (reuse_.mode == reuse_mode::store && retained_dump_pays(*coldest, backlog, costs)) {
      if (auto job = dump_retained(*coldest, jobs)) {
        // Queued here, it is on the lane for the rest of the round.
        ++backlog.transfers;
        backlog.dump_bytes += job->bytes;
        ++promised;
        continue;
      }
    }
    drop_warm(*coldest);
    ++free;
  }
  while (flushing_ && backlog.transfers == 0) { // backlog counts the dumps queued above
    const auto coldest = retained_.coldest_warm();
    if (!coldest)
      break;
    if (reuse_.mode == reuse_mode::store && dump_retained(*coldest, jobs))
      break;
    drop_warm(*coldest);
  }
  return jobs;
}

bool kv_keeper::retained_dump_pays(retained_id id, const lane_backlog& backlog,
                                   const cost_model& costs) const {
  if (backlog.transfers == 0)
    return true;
  const auto* e = retained_.find(id);
  if (e == nullptr)
    return false;
  const auto queued_dumps = backlog.dump_bytes ? costs.dump_ms(backlog.dump_bytes)
                                               : std::optional<double>{0.0};
  const auto queued_loads = backlog.load_bytes ? costs.load_ms(backlog.load_bytes)
                                               : std::optional<double>{0.0};
  const auto dump = costs.dump_ms(snapshot_size(e->kv_len));
  const auto prefill = costs.recompute_ms(e->kv_len);
  if (!queued_dumps || !queued_loads || !dump || !prefill)
    return false;
  return *queued_dumps + *queued_loads + *dump < *prefill;
}

void kv_keeper::drop_warm(retained_id id) {
  const auto* e = retained_.find(id);
  if (e == nullptr || !e->slot)
    return;
  set_warm(*e->slot, std::nullopt);
  retained_.slot_released(id);
  ++counters_.retained_dropped;
}

transfer_job_ptr kv_keeper::dump_retained(retained_id id, kv_jobs& jobs) {
  const auto* e = retained_.find(id);
  if (e == nullptr || !e->slot)
    return nullptr;
  ipc::snapshot_meta meta;
  meta.model_identity = setup_.model_identity;
  meta.model_index = setup_.model_index;
  meta.cache_len = e->kv_len;
  meta.generation = 1;
  meta.sequence_id = id;
  meta.retained = true;
  auto label = std::make_shared<ipc::snapshot_label>();
  label->fingerprint = fingerprint_;
  label->owner = e->scope.owner;
  label->user = e->origin.user;
  label->session = e->origin.session;
  const auto tokens = retained_.tokens(id);
  label->tokens.assign(tokens.begin(), tokens.end());
  auto r = setup_.store->reserve(meta, snapshot_size(e->kv_len), std::move(label));
  if (!r)
    return nullptr; // the retained share is taken by more valuable entries
  forget_evicted(r->evicted, jobs);
  retained_.dump_started(id);
  ++counters_.retained_dumps;
  auto job = std::make_shared<transfer_job>();
  job->kind = transfer_kind::dump;
  job->slot = *e->slot;
  job->cache_len = e->kv_len;
  job->bytes = snapshot_size(job->cache_len);
  job->generation = meta.generation;
  job->snapshot = r->handle;
  job->destination = r->bytes;
  job->retained = id;
  jobs.transfers.push_back(job);
  return job;
}

bool kv_keeper::retained_dump_done(const transfer_job& job, bool ok) {
  set_warm(job.slot, std::nullopt);
  if (!ok) {
    (void)setup_.store->free(job.snapshot);
    retained_.dump_finished(job.retained, std::nullopt);
    return false;
  }
  if (retained_.dump_finished(job.retained, job.snapshot))
    return true;
  (void)setup_.store->free(job.snapshot); // superseded or dropped meanwhile
  return false;
}

bool kv_keeper::expire_idle(time_point now, bool due) {
  if (reuse_.idle_ttl_s == 0)
    return false;
  if (!due && now - last_expiry_check_ < std::chrono::seconds(1))
    return false;
  last_expiry_check_ = now;
  bool any = false;
  for (const auto id : retained_.idle_since(now, std::chrono::seconds(reuse_.idle_ttl_s)))
    if (auto e = retained_.erase(id)) {
      discard(e->slot, e->snapshot, e->dumping);
      ++counters_.retained_expired;
      any = true;
    }
  return any;
}

std::optional<kv_keeper::time_point> kv_keeper::expiry_to_arm() {
  const auto oldest = retained_.oldest_use();
  if (reuse_.idle_ttl_s == 0 || !oldest)
    return std::nullopt;
  const auto due = *oldest + std::chrono::seconds(reuse_.idle_ttl_s);
  if (expiry_due_ && *expiry_due_ <= due)
    return std::nullopt;
  expiry_due_ = due;
  return due;
}

/// Whether a drop request covers `e`: every selector that is set matches.
static bool selected_by(const retained_drop_request& req, const retained_entry& e) {
  return (!req.id || *req.id == e.id)
         && (!req.session
             || (req.session->user == e.origin.user && req.session->name == e.origin.session));
}

retained_drop_result kv_keeper::drop(const retained_drop_request& req) {
  retained_drop_result out;
  for (const auto id : retained_.ids()) {
    if (!selected_by(req, *retained_.find(id)))
      continue;
    auto e = retained_.erase(id);
    ++out.entries;
    out.tokens += e->kv_len;
    out.slots += e->slot && !e->dumping;
    if (e->snapshot) {
      ++out.snapshots;
      out.store_bytes += store_bytes_of(e->kv_len);
    }
    discard(e->slot, e->snapshot, e->dumping);
    ++counters_.retained_admin_dropped;
  }
  return out;
}

void kv_keeper::shutdown() {
  for (const auto id : retained_.ids())
    if (auto e = retained_.erase(id); e && e->slot && !e->dumping)
      set_warm(*e->slot, std::nullopt);
}

void kv_keeper::drop_all() {
  for (const auto id : retained_.ids())
    if (auto e = retained_.erase(id))
      discard(e->slot, e->snapshot, e->dumping);
}

// Frees what a removed entry held. A slot being dumped stays held until the
// dump ends (retained_dump_done frees its snapshot then).
void kv_keeper::discard(std::optional<slot_id> slot, std::optional<ipc::snapshot_handle> snapshot,
                        bool dumping) {
  if (snapshot)
    (void)setup_.store->free(*snapshot);
  if (slot && !dumping)
    set_warm(*slot, std::nullopt);
}

void kv_keeper::forget_retained_snapshot(ipc::snapshot_handle h) {
  if (const auto id = retained_.by_snapshot(h)) {
    if (auto e = retained_.erase(*id))
      discard(e->slot, e->snapshot, e->dumping);
    ++counters_.retained_lost;
  }
}

// What the store evicted for one of our reservations is gone at once: a
// parked sequence of this model will recompute, a retained entry is lost.
// (Another model's scheduler learns of its losses when its pin fails.)
void kv_keeper::forget_evicted(const std::vector<ipc::evicted_snapshot>& evicted, kv_jobs& jobs) {
  for (const auto& e : evicted) {
    if (e.meta.model_index != setup_.model_index)
      continue;
    if (e.meta.retained) {
      if (const auto id = retained_.by_snapshot(e.handle)) {
        retained_.snapshot_lost(*id);
        ++counters_.retained_lost;
      }
      continue;
    }
    // A sequence's snapshot carries its id, so no search is needed.
    if (const auto it = parked_.find(e.meta.sequence_id);
        it != parked_.end() && it->second.at == stage::parked && it->second.handle == e.handle) {
      parked_.erase(it);
      ++counters_.snapshots_lost;
      jobs.lost.push_back(e.meta.sequence_id);
    }
  }
}

// -- parked sequences ----------------------------------------------------------------

kv_jobs kv_keeper::swap_out(seq_id id, slot_id slot, std::uint32_t kv_len,
                            std::uint64_t generation, std::uint8_t priority, std::string& why) {
  kv_jobs jobs;
  const auto bytes = snapshot_size(kv_len);
  ipc::snapshot_meta meta;
  meta.model_identity = setup_.model_identity;
  meta.model_index = setup_.model_index;
  meta.cache_len = kv_len;
  meta.generation = generation;
  meta.sequence_id = id;
  meta.priority = priority;
  auto r = setup_.store->reserve(meta, bytes);
  if (!r) {
    why = r.error().message;
    return jobs;
  }
  forget_evicted(r->evicted, jobs);
  parked_[id] = {r->handle, stage::dumping};
  auto job = std::make_shared<transfer_job>();
  job->kind = transfer_kind::dump;
  job->seq = id;
  job->slot = slot;
  job->cache_len = kv_len;
  job->bytes = snapshot_size(job->cache_len);
  job->generation = generation;
  job->snapshot = r->handle;
  job->destination = r->bytes;
  jobs.transfers.push_back(std::move(job));
  return jobs;
}

void kv_keeper::dump_done(seq_id id, const transfer_job& job, bool ok) {
  if (ok) {
    parked_[id] = {job.snapshot, stage::parked};
    return;
  }
  (void)setup_.store->free(job.snapshot);
  parked_.erase(id);
}

kv_jobs kv_keeper::restore(seq_id id, slot_id slot, std::uint32_t kv_len,
                           std::uint64_t generation) {
  kv_jobs jobs;
  const auto it = parked_.find(id);
  // The snapshot may have been evicted for another model or sequence.
  if (it == parked_.end() || !setup_.store->pin(it->second.handle)) {
    if (it != parked_.end())
      parked_.erase(it);
    ++counters_.snapshots_lost;
    return jobs;
  }
  it->second.at = stage::loading;
  auto job = std::make_shared<transfer_job>();
  job->kind = transfer_kind::load;
  job->seq = id;
  job->slot = slot;
  job->cache_len = kv_len;
  job->bytes = snapshot_size(job->cache_len);
  job->generation = generation;
  job->snapshot = it->second.handle;
  jobs.transfers.push_back(std::move(job));
  return jobs;
}

void kv_keeper::load_done(const transfer_done& done) {
  (void)setup_.store->unpin(done.job.snapshot);
  if (!done.job.keep_snapshot) {
    (void)setup_.store->free(done.job.snapshot);
    parked_.erase(done.job.seq);
  } else if (done.corrupt) {
    // A snapshot whose disk copy failed is freed and counted by the store
    // (disk_corrupt): its handle is stale by now.
    if (setup_.store->meta(done.job.snapshot))
      setup_.store->count_discard(ipc::discard_reason::checksum);
    ++counters_.retained_discarded;
    forget_retained_snapshot(done.job.snapshot);
  }
}

void kv_keeper::count_stored_hit(std::uint32_t length) noexcept {
  ++counters_.reuse_hits;
  counters_.reused_tokens += length;
}

void kv_keeper::release(seq_id id) {
  const auto it = parked_.find(id);
  if (it == parked_.end() || it->second.at != stage::parked)
    return; // a lane works on it: the snapshot is freed when it replies
  (void)setup_.store->free(it->second.handle);
  parked_.erase(it);
}

bool kv_keeper::parked(seq_id id) const {
  const auto it = parked_.find(id);
  return it != parked_.end() && it->second.at == stage::parked;
}

std::optional<ipc::snapshot_tier> kv_keeper::tier_of(const retained_entry& e) const {
  if (!e.snapshot)
    return std::nullopt;
  const auto t = setup_.store->tier(*e.snapshot);
  return t ? std::optional(*t) : std::nullopt;
}

std::uint64_t kv_keeper::store_bytes_of(std::uint32_t kv_len) const {
  const auto g = setup_.store->granularity();
  const auto bytes = snapshot_size(kv_len);
  return (bytes + g - 1) / g * g;
}

} // namespace kvlane::actors
