#include "actors/sequence_lifecycle.hpp"

#include "common/elapsed.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::actors {

// -- events ------------------------------------------------------------------------

void sequence_lifecycle::cancel(seq_id id, std::string_view why, time_point now) {
  auto* s = t_.seqs.find(id);
  if (!s)
    return;
  switch (s->state) {
    case kv_state::queued:
      finish(*s, end_reason::cancelled, std::string{why}, now);
      break;
    case kv_state::parked:
      t_.kv.release(s->id);
      finish(*s, end_reason::cancelled, std::string{why}, now);
      break;
    case kv_state::resident:
      if (s->in_step) {
        mark_cancelled(*s);
      } else {
        t_.seqs.release_slot(*s);
        finish(*s, end_reason::cancelled, std::string{why}, now);
      }
      break;
    case kv_state::dumping:
    case kv_state::loading:
      mark_cancelled(*s); // completed in transfer_ended
      break;
  }
}

bool sequence_lifecycle::stop(seq_id id, std::uint32_t generated, std::uint32_t keep,
                              time_point now) {
  auto* s = t_.seqs.find(id);
  if (!s || s->cancelled)
    return false;
  if (s->in_step || s->state == kv_state::dumping || s->state == kv_state::loading) {
    mark_cancelled(*s); // no longer planned; completed when the lane replies
    s->stop_at = std::pair{generated, keep};
    return false;
  }
  stop_now(*s, generated, keep, now);
  return true;
}

bool sequence_lifecycle::transfer_ended(const transfer_done& done, double hidden_ms,
                                        time_point now) {
  t_.transfers.finished(done.job);
  const auto bytes = done.job.bytes;
  const double ms = ms_between(done.start, done.end);
  t_.stats.transfer_ms += ms;
  t_.stats.transfer_hidden_ms += hidden_ms;
  auto* s = t_.seqs.find(done.job.seq);
  const bool dump = done.job.kind == transfer_kind::dump;
  (dump ? t_.stats.dump_ms_total : t_.stats.load_ms_total) += ms;
  if (dump && done.job.retained != 0) {
    ++t_.stats.dumps;
    if (done.error) {
      ++t_.stats.dump_failures;
      log_.warn("model '{}': retained KV {} could not be stored: {}", model_, done.job.retained,
                *done.error);
    } else {
      t_.costs.observe_dump(bytes, ms);
    }
    t_.kv.retained_dump_done(done.job, !done.error);
    return true;
  }
  if (dump) {
    ++t_.stats.dumps;
    if (!s) {
      t_.kv.dump_done(done.job.seq, done.job, false); // frees the snapshot
      return false;
    }
    t_.seqs.release_slot(*s);
    if (done.error) {
      ++t_.stats.dump_failures;
      log_.warn("model '{}': sequence {} will recompute: {}", model_, s->id, *done.error);
      t_.kv.dump_done(s->id, done.job, false);
      drop_kv(*s);
    } else {
      t_.costs.observe_dump(bytes, ms);
      t_.kv.dump_done(s->id, done.job, true);
      set_state(*s, kv_state::parked);
    }
    if (s->cancelled)
      end_marked(*s, now);
    return true;
  }
  ++t_.stats.loads;
  t_.kv.load_done(done);
  if (!s)
    return true;
  if (done.error) {
    ++t_.stats.load_failures;
    log_.warn("model '{}': sequence {} will recompute: {}", model_, s->id, *done.error);
    // Keep the slot: the recompute starts in it from position 0.
    s->kv_len = 0;
    ++t_.stats.recomputes;
  } else {
    t_.costs.observe_load(bytes, ms);
    // A retained snapshot may cover more than the prompt shares with it:
    // roll back to the match and prefill the rest.
    s->kv_len = done.job.keep_snapshot ? s->reuse_len : done.job.cache_len;
    if (done.job.keep_snapshot) {
      t_.kv.count_stored_hit(s->reuse_len);
      s->reused = s->reuse_len;
    }
  }
  s->reuse_len = 0;
  set_state(*s, kv_state::resident);
  if (s->cancelled)
    end_marked(*s, now);
  return true;
}

fault_actions sequence_lifecycle::step_succeeded(std::span<const seq_id> rows, time_point now) {
  const auto before = t_.faults.health();
  auto verdict = t_.faults.step_succeeded(rows, now);
  note_health(before);
  return verdict;
}

void sequence_lifecycle::step_failed(const step_plan& plan, const backends::backend_error& error,
                                     time_point now) {
  ++t_.stats.step_failures;
  t_.last_step_error = error.message;
  const auto before = t_.faults.health();
  auto actions = t_.faults.step_failed(plan.seqs, now);
  log_.warn("model '{}': step {} with {} rows failed: {} ({}); device {}", model_, plan.number,
            plan.seqs.size(), error.message, backends::to_string(error.code),
            to_string(t_.faults.health()));
  note_health(before);
  // The backend advanced no slot: the same rows can run again.
  for (auto id : plan.seqs) {
    auto* s = t_.seqs.find(id);
    if (!s)
      continue;
    s->in_step = false;
    if (s->cancelled)
      end_marked(*s, now);
  }
  apply_fault_actions(actions, now);
}

void sequence_lifecycle::note_health(device_health before) {
  const auto now = t_.faults.health();
  if (now == before)
    return;
  if (now == device_health::failing)
    log_.error("model '{}': the device fails every row alone; admission paused, next step in {} ms",
               model_, t_.faults.backoff().count());
  else
    log_.info("model '{}': device {} (was {})", model_, to_string(now), to_string(before));
}

void sequence_lifecycle::apply_fault_actions(const fault_actions& actions, time_point now) {
  for (auto id : actions.recompute) {
    auto* s = t_.seqs.find(id);
    if (!s || s->state != kv_state::resident || s->in_step)
      continue;
    log_.warn("model '{}': sequence {} failed alone in a step; recomputing it: {}", model_, id,
              t_.last_step_error);
    t_.seqs.release_slot(*s);
    drop_kv(*s);
  }
  for (const auto& f : actions.fail_row)
    fail_for_fault(f.id,
                   fmt::format("the NPU failed this request's step row {} times when it ran alone, "
                               "recomputing it in between: {}",
                               f.failures, t_.last_step_error),
                   now);
  for (const auto& f : actions.fail_device)
    fail_for_fault(f.id,
                   fmt::format("the NPU failed {} steps in a row that carried this request, "
                               "backing off in between: {}",
                               f.failures, t_.last_step_error),
                   now);
}

void sequence_lifecycle::fail_for_fault(seq_id id, std::string message, time_point now) {
  auto* s = t_.seqs.find(id);
  if (!s || s->in_step || s->state != kv_state::resident)
    return;
  log_.warn("model '{}': sequence {} fails: {}", model_, id, message);
  t_.seqs.release_slot(*s);
  finish(*s, end_reason::error, std::move(message), now);
}

void sequence_lifecycle::shutdown(const std::string& why) {
  t_.kv.shutdown(); // stored snapshots stay in the store, for the index written at exit
  for (auto id : t_.seqs.ids()) {
    auto* s = t_.seqs.find(id);
    if (!s)
      continue;
    // Lanes still working on a sequence hold its slot; the store pages of a
    // parked one go back now. Nothing is waited for: the streams end here.
    if (s->state == kv_state::parked)
      t_.kv.release(id);
    if (s->state == kv_state::resident && !s->in_step)
      t_.seqs.release_slot(*s);
    stream_end end;
    end.reason = end_reason::cancelled;
    end.message = why;
    end.prompt_tokens = s->prompt_len;
    end.generated_tokens = s->generated;
    end.preemptions = s->preemptions;
    end.cached_tokens = std::min(s->reused, s->prompt_len);
    port_.end_stream(*s, std::move(end));
    if (s->state == kv_state::dumping || s->state == kv_state::loading || s->in_step) {
      mark_cancelled(*s);
      s->stop_at.reset(); // its stream ended as cancelled just above
    } else {
      port_.phase_changed(*s, seq_phase::ended);
      t_.seqs.erase(id);
    }
  }
}

retained_drop_result sequence_lifecycle::drop_retained(const retained_drop_request& req) {
  const auto out = t_.kv.drop(req);
  if (out.entries > 0)
    log_.info("model '{}': dropped {} retained entries on request ({} slots, {} snapshots, {} "
              "store bytes)",
              model_, out.entries, out.slots, out.snapshots, out.store_bytes);
  return out;
}

// -- steps ---------------------------------------------------------------------------

std::vector<step_candidate> sequence_lifecycle::step_candidates(const next_step& next) const {
  // A retry runs the failed step's rows again, an isolation step one of them.
  const bool only_listed = next.what != next_step::kind::compose;
  std::vector<step_candidate> out;
  for (auto* s : t_.seqs.slot_holders()) {
    if (s->state != kv_state::resident || s->cancelled || s->in_step)
      continue;
    if (only_listed && std::find(next.rows.begin(), next.rows.end(), s->id) == next.rows.end())
      continue;
    out.push_back({s->id, &s->position, s->kv_len, static_cast<std::uint32_t>(s->tokens.size())});
  }
  return out;
}

step_plan_ptr sequence_lifecycle::start_step(const std::vector<step_row_plan>& rows,
                                             std::uint64_t number) {
  auto plan = std::make_shared<step_plan>();
  plan->number = number;
  for (const auto& row : rows) {
    auto& s = *t_.seqs.find(row.id);
    if (row.prefill)
      t_.stats.prefill_tokens += row.tokens;
    s.in_step = true;
    auto from = s.tokens.begin() + s.kv_len;
    plan->seqs.push_back(s.id);
    plan->tokens.emplace_back(from, from + row.tokens);
  }
  // The rows' spans point into plan->tokens, complete from here on.
  for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
    const auto& s = *t_.seqs.find(plan->seqs[i]);
    plan->rows.push_back({*s.slot, s.kv_len, plan->tokens[i]});
  }
  return plan;
}

bool sequence_lifecycle::probe_needs_a_sequence(bool step_in_flight, time_point now) const {
  if (t_.faults.health() != device_health::failing || step_in_flight
      || t_.faults.next(now).what == next_step::kind::wait)
    return false;
  for (auto* s : t_.seqs.slot_holders())
    if (s->state == kv_state::resident || s->state == kv_state::loading)
      return false;
  return true;
}

// -- a step's rows -------------------------------------------------------------------

void sequence_lifecycle::charge_step(sequence& s) {
  const auto before = s.position;
  t_.mlfq.charge_step(s.position);
  t_.seqs.moved(s, before);
}

void sequence_lifecycle::retain_or_release(sequence& s, time_point now) {
  if (!s.slot || t_.shutting_down) {
    t_.seqs.release_slot(s);
    return;
  }
  const slot_id slot = *s.slot;
  const bool kept =
    t_.kv.retain(s.owner, s.session_name, std::span(s.tokens).first(s.kv_len), slot, now);
  t_.seqs.release_slot(s);
  if (kept)
    port_.retained_kept();
}

void sequence_lifecycle::finish(sequence& s, end_reason reason, std::string message,
                                time_point now) {
  port_.ended(s, reason);
  stream_end end;
  end.reason = reason;
  end.message = std::move(message);
  end.prompt_tokens = s.prompt_len;
  end.generated_tokens = s.generated;
  end.preemptions = s.preemptions;
  end.cached_tokens = std::min(s.reused, s.prompt_len);
  port_.end_stream(s, std::move(end));
  port_.phase_changed(s, seq_phase::ended);
  const auto id = s.id;
  t_.seqs.erase(id); // `s` dies here
  apply_fault_actions(t_.faults.forget(id, now), now);
}

void sequence_lifecycle::end_marked(sequence& s, time_point now) {
  if (s.stop_at) {
    stop_now(s, s.stop_at->first, s.stop_at->second, now);
    return;
  }
  if (s.state == kv_state::parked)
    t_.kv.release(s.id);
  t_.seqs.release_slot(s);
  finish(s, end_reason::cancelled, "cancelled", now);
}

void sequence_lifecycle::mark_cancelled(sequence& s) {
  s.cancelled = true;
  t_.seqs.unrank(s);
}

// Ends `s` as a sampled stop token after its first `generated` tokens would:
// the tokens it made past them are dropped (the slot's positions past the
// kept length are simply overwritten by the next user: a rollback is a
// shorter cache_len), and its KV up to the prompt plus `keep` tokens is
// retained when it sits in a slot. A parked sequence's snapshot is freed
// (retention keeps warm KV only); a queued one holds no KV.
void sequence_lifecycle::stop_now(sequence& s, std::uint32_t generated, std::uint32_t keep,
                                  time_point now) {
  s.generated = std::min(s.generated, generated);
  const auto kept = s.prompt_len + std::min(keep, s.generated);
  if (s.tokens.size() > kept)
    s.tokens.resize(kept);
  if (s.constrained)
    s.constrained->rollback(kept - s.prompt_len); // the grammar state of the kept tokens
  s.kv_len = std::min<std::uint32_t>(s.kv_len, kept);
  if (s.state == kv_state::parked)
    t_.kv.release(s.id);
  if (s.state == kv_state::resident)
    retain_or_release(s, now);
  else
    t_.seqs.release_slot(s);
  finish(s, end_reason::stop, {}, now);
}

void sequence_lifecycle::set_state(sequence& s, kv_state state) {
  t_.seqs.set_state(s, state);
  port_.phase_changed(s, phase_of(state));
}

void sequence_lifecycle::drop_kv(sequence& s) {
  set_state(s, kv_state::queued);
  s.kv_len = 0;
  ++t_.stats.recomputes;
}

// -- the planner's decisions -----------------------------------------------------------

void sequence_lifecycle::drop_lost(const std::vector<seq_id>& lost) {
  for (const auto id : lost)
    if (auto* s = t_.seqs.find(id); s && s->state == kv_state::parked)
      drop_kv(*s);
}

void sequence_lifecycle::carry_out(kv_jobs jobs) {
  drop_lost(jobs.lost);
  for (auto& job : jobs.transfers)
    port_.send_transfer(std::move(job));
}

void sequence_lifecycle::start_warm(sequence& s, slot_id slot, std::uint32_t length) {
  t_.seqs.take_slot(s, slot);
  s.kv_len = length;
  s.reused = length;
  set_state(s, kv_state::resident);
}

// Queued sequences whose prefix sits warm in a slot take that slot now,
// before any warm slot is reclaimed: the KV they need is already on the
// device. One outside the target is then an ordinary resident the planner may
// preempt (a swap keeps its KV as a parked sequence's, worth more than a
// retained one's). Only a sequence whose first reuse block is a warm entry's
// can hit; the search ends when no slot is warm.
void sequence_lifecycle::take_warm_hits(std::size_t limit, time_point now) {
  if (t_.kv.reuse().mode == reuse_mode::off || !t_.kv.any_warm())
    return;
  const auto heads = t_.kv.warm_heads();
  t_.seqs.for_each_with_head(heads, limit, [&](seq_id id) {
    auto& s = *t_.seqs.find(id);
    if (s.state != kv_state::queued || !s.head
        || !std::binary_search(heads.begin(), heads.end(), *s.head))
      return true;
    if (auto m = t_.kv.find_reusable(s.owner, s.tokens); m && m->slot) {
      t_.seqs.note_first_slot(s, now);
      start_warm(s, t_.kv.take_warm(*m, now), m->length);
      return t_.kv.any_warm();
    }
    return true;
  });
}

std::uint32_t sequence_lifecycle::free_slots() const {
  std::uint32_t free = 0;
  const auto owners = t_.seqs.owners();
  for (slot_id i = 0; i < owners.size(); ++i)
    free += !owners[i] && !t_.kv.warm_in(i);
  return free;
}

void sequence_lifecycle::reclaim_warm(const std::vector<sequence*>& order, std::size_t target,
                                      std::uint32_t spare) {
  std::uint32_t waiting = 0;
  for (std::size_t i = 0; i < order.size() && i < target; ++i)
    waiting += order[i]->state == kv_state::queued || order[i]->state == kv_state::parked;
  carry_out(t_.kv.reclaim_warm(waiting + spare, free_slots(), t_.transfers.promised_slots(),
                               t_.transfers.backlog(), t_.costs));
}

// A queued sequence just given `s.slot` starts from retained KV if it can.
bool sequence_lifecycle::reuse_retained(sequence& s, time_point now) {
  auto start = t_.kv.start_from_retained(s.id, s.owner, s.tokens, *s.slot, t_.costs, now);
  switch (start.how) {
    case reuse_start::kind::prefill:
      return false;
    case reuse_start::kind::warm:
      t_.seqs.release_slot(s); // the planner sees the warm slot as held: swapping is safe
      start_warm(s, start.slot, start.length);
      return true;
    case reuse_start::kind::load:
      s.reuse_len = start.length;
      set_state(s, kv_state::loading);
      carry_out(std::move(start.jobs));
      return true;
  }
  return false;
}

void sequence_lifecycle::admit(sequence& s, slot_id slot, time_point now) {
  t_.seqs.take_slot(s, slot);
  if (s.state == kv_state::queued) {
    t_.seqs.note_first_slot(s, now);
    s.kv_len = 0;
    s.reused = 0;
    if (reuse_retained(s, now))
      return;
    set_state(s, kv_state::resident); // prefill (or recompute) from position 0
    return;
  }
  // Parked: the snapshot may have been evicted for another model or sequence.
  auto jobs = t_.kv.restore(s.id, slot, s.kv_len, s.generation);
  if (jobs.transfers.empty()) {
    drop_kv(s);
    set_state(s, kv_state::resident);
    return;
  }
  set_state(s, kv_state::loading);
  carry_out(std::move(jobs));
}

std::uint8_t sequence_lifecycle::snapshot_priority(const sequence& s) noexcept {
  // Interactive above batch; within a class, higher levels (long runners)
  // are cheaper to lose.
  auto base = s.position.cls == priority_class::interactive ? 128 : 0;
  return static_cast<std::uint8_t>(base + 64 - std::min(s.position.level, 63u));
}

void sequence_lifecycle::evict(sequence& s, eviction how) {
  ++t_.stats.preemptions;
  ++s.preemptions;
  if (how == eviction::recompute) {
    t_.seqs.release_slot(s);
    drop_kv(s);
    return;
  }
  std::string why;
  auto jobs =
    t_.kv.swap_out(s.id, *s.slot, s.kv_len, s.generation + 1, snapshot_priority(s), why);
  if (jobs.transfers.empty()) {
    // No room even after eviction: recompute instead (never fail the request).
    log_.debug("model '{}': store cannot hold sequence {} ({} bytes): {}; recomputing", model_,
               s.id, t_.kv.snapshot_size(s.kv_len), why);
    t_.seqs.release_slot(s);
    drop_kv(s);
    return;
  }
  drop_lost(jobs.lost);
  ++t_.stats.swaps;
  ++s.generation;
  set_state(s, kv_state::dumping);
  for (auto& job : jobs.transfers)
    port_.send_transfer(std::move(job));
}

} // namespace kvlane::actors
