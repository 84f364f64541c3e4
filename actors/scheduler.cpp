#include "actors/scheduler.hpp"

#include "actors/cost_model.hpp"
#include "actors/lane.hpp"
#include "common/logging.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;
using actors::scheduler_mode;

constexpr std::uint32_t max_step_failures = 3;

double ms_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

enum class seq_state : std::uint8_t {
  waiting, ///< no KV anywhere: new, or dropped and to be recomputed
  resident,
  dumping,
  parked,
  loading,
};

seq_phase phase_of(seq_state s) {
  switch (s) {
    case seq_state::waiting: return seq_phase::queued;
    case seq_state::resident: return seq_phase::resident;
    case seq_state::dumping: return seq_phase::dumping;
    case seq_state::parked: return seq_phase::parked;
    case seq_state::loading: return seq_phase::loading;
  }
  return seq_phase::queued;
}

struct sequence {
  seq_id id = 0;
  std::string client;
  priority_class cls = priority_class::interactive;
  caf::actor session;
  std::vector<token_id> tokens; ///< prompt, then generated tokens
  std::uint32_t prompt_len = 0;
  std::uint32_t generated = 0;
  sampler smp;
  seq_state state = seq_state::waiting;
  std::uint32_t kv_len = 0; ///< positions valid in the slot or snapshot
  std::optional<slot_id> slot;
  ipc::snapshot_handle snapshot;
  std::uint64_t generation = 0; ///< bumped at every dump
  bool in_step = false;
  bool cancelled = false; ///< cancel arrived while a lane works on it
  std::uint32_t level = 0;
  std::uint32_t quantum_used = 0;
  std::uint64_t turn = 0;
  std::uint64_t waited_steps = 0;
  std::uint32_t step_failures = 0;
  std::uint32_t preemptions = 0;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();

  explicit sequence(const submission& s)
    : id(s.id), client(s.client), cls(s.priority), tokens(s.prompt),
      prompt_len(static_cast<std::uint32_t>(s.prompt.size())), smp(s.sampling) {}
};

struct scheduler_state {
  static inline const char* name = "scheduler";

  scheduler_setup setup;
  backends::backend_info info;
  std::shared_ptr<spdlog::logger> log;
  lane_actor compute;
  lane_actor transfer;
  scheduler_mode mode = scheduler_mode::overlap;
  bool serialized = false; ///< transfers share the compute lane (sync, or no overlap)
  bool fallback = false;   ///< overlap mode on a backend that cannot overlap
  std::uint32_t quantum = 64;
  std::uint32_t levels = 4;
  std::uint32_t max_step_tokens = 0;
  std::uint32_t aging_steps = 0;
  std::uint32_t spare = 1;

  std::unordered_map<seq_id, std::unique_ptr<sequence>> seqs;
  std::vector<std::optional<seq_id>> slot_owner;
  std::uint64_t next_turn = 1;
  std::uint64_t step_number = 0;
  bool step_in_flight = false;
  clock::time_point step_started;
  std::uint32_t transfers_on_transfer_lane = 0;
  std::uint32_t transfers_on_compute_lane = 0;
  cost_model costs;
  scheduler_stats stats;
  bool shutting_down = false;

  // Intervals of recent steps, to find how much transfer time they hid.
  std::vector<std::pair<clock::time_point, clock::time_point>> recent_steps;
};

using scheduler_actor = caf::stateful_actor<scheduler_state>;

class scheduler_logic {
public:
  explicit scheduler_logic(scheduler_actor* self) : self_(self), st_(self->state) {}

  // -- events ------------------------------------------------------------------

  void on_submit(const submission& s) {
    if (st_.shutting_down) {
      stream_end end;
      end.reason = end_reason::cancelled;
      end.message = "daemon shutting down";
      end.prompt_tokens = static_cast<std::uint32_t>(s.prompt.size());
      self_->send(s.session, end_atom::value, end);
      return;
    }
    auto seq = std::make_unique<sequence>(s);
    seq->session = s.session;
    seq->turn = st_.next_turn++;
    seq->level = initial_level(seq->prompt_len);
    ++st_.stats.submitted;
    notify(*seq, seq_phase::queued);
    st_.seqs.emplace(seq->id, std::move(seq));
    schedule();
  }

  void on_cancel(seq_id id, std::string_view why) {
    auto* s = find(id);
    if (!s)
      return;
    switch (s->state) {
      case seq_state::waiting:
        finish(*s, end_reason::cancelled, std::string{why});
        break;
      case seq_state::parked:
        (void)st_.setup.store->free(s->snapshot);
        finish(*s, end_reason::cancelled, std::string{why});
        break;
      case seq_state::resident:
        if (s->in_step) {
          s->cancelled = true;
        } else {
          release_slot(*s);
          finish(*s, end_reason::cancelled, std::string{why});
        }
        break;
      case seq_state::dumping:
      case seq_state::loading:
        s->cancelled = true; // completed in on_transfer_done
        break;
    }
    schedule();
  }

  void on_step_done(step_done& done) {
    st_.step_in_flight = false;
    const double ms = ms_between(done.start, done.end);
    auto& plan = *done.plan;
    if (done.error) {
      ++st_.stats.step_failures;
      st_.log->warn("model '{}': step {} with {} rows failed: {} ({})", st_.setup.model,
                    plan.number, plan.seqs.size(), done.error->message,
                    backends::to_string(done.error->code));
      // The backend advanced no slot: the same rows can run again.
      for (auto id : plan.seqs) {
        auto* s = find(id);
        if (!s)
          continue;
        s->in_step = false;
        if (s->cancelled) {
          release_slot(*s);
          finish(*s, end_reason::cancelled, "cancelled");
        } else if (++s->step_failures >= max_step_failures) {
          release_slot(*s);
          finish(*s, end_reason::error,
                 fmt::format("the NPU failed {} steps in a row: {}", s->step_failures,
                             done.error->message));
        }
      }
      schedule();
      return;
    }

    std::uint32_t total_tokens = 0;
    for (auto& row : plan.rows)
      total_tokens += static_cast<std::uint32_t>(row.tokens.size());
    st_.costs.observe_step(total_tokens, ms);
    ++st_.stats.steps;
    st_.stats.step_busy_ms += ms;
    remember_step(done.start, done.end);

    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      auto* s = find(plan.seqs[i]);
      if (!s)
        continue;
      s->in_step = false;
      s->step_failures = 0;
      s->kv_len += static_cast<std::uint32_t>(plan.rows[i].tokens.size());
      if (s->cancelled) {
        release_slot(*s);
        finish(*s, end_reason::cancelled, "cancelled");
        continue;
      }
      use_quantum(*s);
      if (s->kv_len < s->tokens.size())
        continue; // a prefill chunk that is not the last one
      auto tok = s->smp.sample(done.out.row(i));
      if (s->smp.is_stop(tok)) {
        release_slot(*s);
        finish(*s, end_reason::stop, {});
        continue;
      }
      s->tokens.push_back(tok);
      ++s->generated;
      ++st_.stats.tokens_generated;
      self_->send(s->session, tokens_atom::value, std::vector<token_id>{tok});
      if (s->generated >= s->smp.params().max_tokens) {
        release_slot(*s);
        finish(*s, end_reason::length, {});
      }
    }
    age_waiting();
    schedule();
  }

  void on_transfer_done(transfer_done& done) {
    --(st_.serialized ? st_.transfers_on_compute_lane : st_.transfers_on_transfer_lane);
    const double ms = ms_between(done.start, done.end);
    st_.stats.transfer_ms += ms;
    st_.stats.transfer_hidden_ms += hidden_ms(done.start, done.end);
    auto bytes = st_.setup.backend->snapshot_size(done.job.cache_len);
    auto* s = find(done.job.seq);
    auto* store = st_.setup.store.get();

    (done.job.kind == transfer_kind::dump ? st_.stats.dump_ms_total : st_.stats.load_ms_total) += ms;
    if (done.job.kind == transfer_kind::dump) {
      ++st_.stats.dumps;
      if (!s) {
        (void)store->free(done.job.snapshot);
        return;
      }
      release_slot(*s);
      if (done.error) {
        ++st_.stats.dump_failures;
        st_.log->warn("model '{}': sequence {} will recompute: {}", st_.setup.model, s->id,
                      *done.error);
        (void)store->free(done.job.snapshot);
        drop_kv(*s);
      } else {
        st_.costs.observe_dump(bytes, ms);
        set_state(*s, seq_state::parked);
        s->snapshot = done.job.snapshot;
      }
      if (s->cancelled) {
        if (s->state == seq_state::parked)
          (void)store->free(s->snapshot);
        finish(*s, end_reason::cancelled, "cancelled");
      }
    } else {
      ++st_.stats.loads;
      (void)store->unpin(done.job.snapshot);
      (void)store->free(done.job.snapshot);
      if (!s)
        return;
      s->snapshot = {};
      if (done.error) {
        ++st_.stats.load_failures;
        st_.log->warn("model '{}': sequence {} will recompute: {}", st_.setup.model, s->id,
                      *done.error);
        // Keep the slot: the recompute starts in it from position 0.
        s->kv_len = 0;
        ++st_.stats.recomputes;
      } else {
        st_.costs.observe_load(bytes, ms);
        s->kv_len = done.job.cache_len;
      }
      set_state(*s, seq_state::resident);
      if (s->cancelled) {
        release_slot(*s);
        finish(*s, end_reason::cancelled, "cancelled");
      }
    }
    schedule();
  }

  void reschedule() { schedule(); }

  void on_shutdown(const std::string& why) {
    st_.shutting_down = true;
    std::vector<seq_id> ids;
    for (auto& [id, s] : st_.seqs)
      ids.push_back(id);
    for (auto id : ids) {
      auto* s = find(id);
      if (!s)
        continue;
      // Lanes still working on a sequence hold its slot; the store pages of a
      // parked one go back now. Nothing is waited for: the streams end here.
      if (s->state == seq_state::parked)
        (void)st_.setup.store->free(s->snapshot);
      if (s->state == seq_state::resident && !s->in_step)
        release_slot(*s);
      auto& seq = *s;
      finish_stream(seq, end_reason::cancelled, why);
      if (seq.state == seq_state::dumping || seq.state == seq_state::loading || seq.in_step) {
        seq.cancelled = true;
        seq.session = {};
      } else {
        notify(seq, seq_phase::ended);
        st_.seqs.erase(id);
      }
    }
  }

  std::vector<sequence_info> list() const {
    std::vector<sequence_info> out;
    auto now = clock::now();
    for (auto& [id, s] : st_.seqs) {
      if (s->cancelled)
        continue;
      sequence_info i;
      i.id = id;
      i.client = s->client;
      i.model = st_.setup.model;
      i.priority = s->cls;
      i.phase = phase_of(s->state);
      i.tokens_in = s->prompt_len;
      i.tokens_out = s->generated;
      i.level = s->level;
      i.preemptions = s->preemptions;
      i.slot = s->slot ? static_cast<std::int32_t>(*s->slot) : -1;
      i.age_ms = ms_between(s->arrived, now);
      out.push_back(std::move(i));
    }
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id < b.id; });
    return out;
  }

  scheduler_stats snapshot_stats() const {
    auto out = st_.stats;
    out.model = st_.setup.model;
    out.mode = st_.mode;
    out.slots = st_.info.slots;
    for (auto& o : st_.slot_owner)
      out.slots_busy += o.has_value();
    for (auto& [id, s] : st_.seqs) {
      switch (s->state) {
        case seq_state::waiting: ++out.waiting; break;
        case seq_state::resident: ++out.resident; break;
        case seq_state::parked: ++out.parked; break;
        case seq_state::loading: ++out.loading; break;
        case seq_state::dumping: ++out.dumping; break;
      }
      if (s->state == seq_state::waiting || s->state == seq_state::parked)
        ++(s->cls == priority_class::interactive ? out.queued_interactive : out.queued_batch);
    }
    auto full = st_.info.caps.extent == backends::snapshot_extent::full_slot
                  ? st_.info.snapshot_bytes
                  : st_.info.bytes_per_token * st_.info.max_context;
    out.step_base_ms = st_.costs.step_base_ms().value_or(0);
    out.step_per_token_ms = st_.costs.step_per_token_ms().value_or(0);
    out.dump_ms = st_.costs.dump_ms(full).value_or(0);
    out.load_ms = st_.costs.load_ms(full).value_or(0);
    return out;
  }

private:
  // -- helpers -------------------------------------------------------------------

  sequence* find(seq_id id) {
    auto it = st_.seqs.find(id);
    return it == st_.seqs.end() ? nullptr : it->second.get();
  }

  std::uint32_t quantum_of(std::uint32_t level) const {
    auto q = st_.quantum << std::min(level, 20u);
    // Serialized fallback: fewer, larger switches below the top level, so new
    // requests still get their first turn as early as in sync mode.
    return level > 0 && st_.fallback ? q * 4 : q;
  }

  // Skip-join: a long prompt enters at the level whose quantum covers its
  // prefill, instead of being demoted level by level.
  std::uint32_t initial_level(std::uint32_t prompt_len) const {
    if (st_.mode == scheduler_mode::fcfs)
      return 0;
    auto chunk = std::max(1u, st_.info.max_prefill_chunk);
    auto prefill_steps = (prompt_len + chunk - 1) / chunk;
    std::uint32_t level = 0;
    while (level + 1 < st_.levels && quantum_of(level) < prefill_steps)
      ++level;
    return level;
  }

  void use_quantum(sequence& s) {
    if (st_.mode == scheduler_mode::fcfs)
      return;
    if (++s.quantum_used < quantum_of(s.level))
      return;
    s.quantum_used = 0;
    if (s.level + 1 < st_.levels)
      ++s.level;
    s.turn = st_.next_turn++; // to the back of its (new) level
  }

  void age_waiting() {
    if (st_.aging_steps == 0 || st_.mode == scheduler_mode::fcfs)
      return;
    for (auto& [id, s] : st_.seqs) {
      if (s->state == seq_state::resident) {
        s->waited_steps = 0;
        continue;
      }
      if (++s->waited_steps >= st_.aging_steps && s->level > 0) {
        s->level = 0;
        s->quantum_used = 0;
        s->waited_steps = 0;
      }
    }
  }

  void remember_step(clock::time_point a, clock::time_point b) {
    auto& r = st_.recent_steps;
    r.emplace_back(a, b);
    if (r.size() > 64)
      r.erase(r.begin(), r.begin() + 32);
  }

  double hidden_ms(clock::time_point a, clock::time_point b) const {
    if (st_.serialized)
      return 0; // transfers run on the compute lane: nothing is hidden
    double hidden = 0;
    for (auto& [s, e] : st_.recent_steps) {
      auto lo = std::max(a, s);
      auto hi = std::min(b, e);
      if (lo < hi)
        hidden += ms_between(lo, hi);
    }
    // A step still running overlaps the transfer from its start on.
    if (st_.step_in_flight) {
      auto lo = std::max(a, st_.step_started);
      if (lo < b)
        hidden += ms_between(lo, b);
    }
    return std::min(hidden, ms_between(a, b));
  }

  std::uint8_t snapshot_priority(const sequence& s) const {
    // Interactive above batch; within a class, higher levels (long runners)
    // are cheaper to lose.
    auto base = s.cls == priority_class::interactive ? 128 : 0;
    return static_cast<std::uint8_t>(base + 64 - std::min(s.level, 63u));
  }

  void notify(const sequence& s, seq_phase phase) {
    if (st_.setup.observer)
      st_.setup.observer(st_.setup.model, s.id, phase);
  }

  void set_state(sequence& s, seq_state state) {
    s.state = state;
    notify(s, phase_of(state));
  }

  void release_slot(sequence& s) {
    if (s.slot) {
      st_.slot_owner[*s.slot].reset();
      s.slot.reset();
    }
  }

  void drop_kv(sequence& s) {
    set_state(s, seq_state::waiting);
    s.kv_len = 0;
    s.snapshot = {};
    ++st_.stats.recomputes;
  }

  void finish_stream(sequence& s, end_reason reason, std::string message) {
    if (!s.session)
      return;
    stream_end end;
    end.reason = reason;
    end.message = std::move(message);
    end.prompt_tokens = s.prompt_len;
    end.generated_tokens = s.generated;
    end.preemptions = s.preemptions;
    self_->send(s.session, end_atom::value, std::move(end));
    s.session = {};
  }

  void finish(sequence& s, end_reason reason, std::string message) {
    switch (reason) {
      case end_reason::cancelled: ++st_.stats.cancelled; break;
      case end_reason::error: ++st_.stats.failed; break;
      default: ++st_.stats.finished; break;
    }
    finish_stream(s, reason, std::move(message));
    notify(s, seq_phase::ended);
    st_.seqs.erase(s.id); // `s` dies here
  }

  std::optional<slot_id> free_slot() const {
    for (slot_id i = 0; i < st_.slot_owner.size(); ++i)
      if (!st_.slot_owner[i])
        return i;
    return std::nullopt;
  }

  std::uint32_t free_slots() const {
    std::uint32_t n = 0;
    for (auto& o : st_.slot_owner)
      n += !o.has_value();
    return n;
  }

  void take_slot(sequence& s, slot_id slot) {
    st_.slot_owner[slot] = s.id;
    s.slot = slot;
  }

  /// Live sequences, best first.
  std::vector<sequence*> ranked() {
    std::vector<sequence*> all;
    all.reserve(st_.seqs.size());
    for (auto& [id, s] : st_.seqs)
      if (!s->cancelled)
        all.push_back(s.get());
    if (st_.mode == scheduler_mode::fcfs) {
      std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->turn < b->turn; });
      return all;
    }
    std::sort(all.begin(), all.end(), [](auto* a, auto* b) {
      return std::tie(a->cls, a->level, a->turn) < std::tie(b->cls, b->level, b->turn);
    });
    // Within one (class, level), interleave clients round-robin so one client
    // with many requests cannot crowd out another.
    std::vector<sequence*> out;
    out.reserve(all.size());
    for (std::size_t i = 0; i < all.size();) {
      std::size_t j = i;
      while (j < all.size() && all[j]->cls == all[i]->cls && all[j]->level == all[i]->level)
        ++j;
      std::vector<std::pair<std::string_view, std::vector<sequence*>>> by_client;
      for (std::size_t k = i; k < j; ++k) {
        auto it = std::find_if(by_client.begin(), by_client.end(),
                               [&](auto& p) { return p.first == all[k]->client; });
        if (it == by_client.end())
          by_client.push_back({all[k]->client, {all[k]}});
        else
          it->second.push_back(all[k]);
      }
      for (std::size_t round = 0; out.size() < j; ++round)
        for (auto& [client, list] : by_client)
          if (round < list.size())
            out.push_back(list[round]);
      i = j;
    }
    return out;
  }

  // -- the planner -----------------------------------------------------------------

  void schedule() {
    if (!st_.shutting_down)
      plan_slots();
    maybe_step();
  }

  void plan_slots() {
    auto order = ranked();
    const auto slots = st_.info.slots;
    const bool preempt = st_.mode != scheduler_mode::fcfs;
    const std::uint32_t target_size =
      preempt ? std::max(1u, slots - std::min(st_.spare, slots - 1)) : slots;
    std::vector<bool> in_target(order.size(), false);
    for (std::size_t i = 0; i < order.size() && i < target_size; ++i)
      in_target[i] = true;

    // Admit target sequences that hold no slot. Slots whose dump is under
    // way are promised to the first of them; the others make a victim.
    std::uint32_t promised = slots_being_freed();
    for (std::size_t i = 0; i < order.size() && i < target_size; ++i) {
      auto& s = *order[i];
      if (s.state != seq_state::waiting && s.state != seq_state::parked)
        continue;
      auto slot = free_slot();
      if (!slot && promised > 0) {
        --promised;
        continue;
      }
      if (!slot && preempt) {
        // A dump queued behind other transfers would hold its slot idle:
        // the victim keeps computing until the lane is free.
        auto* victim = pick_victim(order, in_target);
        if (victim && (transfers_pending() == 0 || would_recompute(*victim)))
          evict(*victim); // a recompute frees the slot at once, a dump later
        slot = free_slot();
      }
      if (slot)
        admit(s, *slot);
    }

    // Restore the spare slots, evicting the lowest-ranked residents outside
    // the target, but only when the lane that would dump them is idle: until
    // then they keep computing.
    if (!preempt)
      return;
    while (free_slots() + promised < std::min(st_.spare, slots - 1)) {
      auto* victim = pick_victim(order, in_target);
      if (!victim)
        break;
      if (transfers_pending() > 0 && !would_recompute(*victim))
        break;
      evict(*victim);
      promised += victim->state == seq_state::dumping;
    }
  }

  std::uint32_t slots_being_freed() const {
    std::uint32_t n = 0;
    for (auto& [id, s] : st_.seqs)
      n += s->state == seq_state::dumping;
    return n;
  }

  std::uint32_t transfers_pending() const {
    return st_.serialized ? st_.transfers_on_compute_lane : st_.transfers_on_transfer_lane;
  }

  sequence* pick_victim(const std::vector<sequence*>& order, const std::vector<bool>& in_target) {
    for (std::size_t i = order.size(); i-- > 0;) {
      auto* s = order[i];
      if (in_target[i])
        break; // everything above is in the target
      if (s->state == seq_state::resident && !s->in_step)
        return s;
    }
    return nullptr;
  }

  bool would_recompute(const sequence& s) const {
    // A device without snapshots (caps.snapshots = false) can only recompute.
    return s.kv_len == 0 || !st_.info.caps.snapshots
           || st_.costs.prefer_recompute(s.kv_len, st_.setup.backend->snapshot_size(s.kv_len),
                                         st_.serialized);
  }

  void evict(sequence& s) {
    ++st_.stats.preemptions;
    ++s.preemptions;
    if (would_recompute(s)) {
      release_slot(s);
      drop_kv(s);
      return;
    }
    auto bytes = st_.setup.backend->snapshot_size(s.kv_len);
    ipc::snapshot_meta meta;
    meta.model_identity = st_.info.identity;
    meta.model_index = st_.setup.model_index;
    meta.cache_len = s.kv_len;
    meta.generation = s.generation + 1;
    meta.sequence_id = s.id;
    meta.priority = snapshot_priority(s);
    auto r = st_.setup.store->reserve(meta, bytes);
    if (!r) {
      // No room even after eviction: recompute instead (never fail the request).
      st_.log->debug("model '{}': store cannot hold sequence {} ({} bytes): {}; recomputing",
                     st_.setup.model, s.id, bytes, r.error().message);
      release_slot(s);
      drop_kv(s);
      return;
    }
    ++st_.stats.swaps;
    ++s.generation;
    set_state(s, seq_state::dumping);
    s.snapshot = r->handle;
    auto job = std::make_shared<transfer_job>();
    job->kind = transfer_kind::dump;
    job->seq = s.id;
    job->slot = *s.slot;
    job->cache_len = s.kv_len;
    job->generation = s.generation;
    job->snapshot = r->handle;
    job->destination = r->bytes;
    send_transfer(std::move(job));
  }

  void admit(sequence& s, slot_id slot) {
    take_slot(s, slot);
    if (s.state == seq_state::waiting) {
      set_state(s, seq_state::resident); // prefill (or recompute) from position 0
      s.kv_len = 0;
      return;
    }
    // Parked: the snapshot may have been evicted for another model or sequence.
    if (auto pinned = st_.setup.store->pin(s.snapshot); !pinned) {
      ++st_.stats.snapshots_lost;
      drop_kv(s);
      set_state(s, seq_state::resident);
      return;
    }
    set_state(s, seq_state::loading);
    auto job = std::make_shared<transfer_job>();
    job->kind = transfer_kind::load;
    job->seq = s.id;
    job->slot = slot;
    job->cache_len = s.kv_len;
    job->generation = s.generation;
    job->snapshot = s.snapshot;
    send_transfer(std::move(job));
  }

  void send_transfer(transfer_job_ptr job) {
    auto& lane = st_.serialized ? st_.compute : st_.transfer;
    ++(st_.serialized ? st_.transfers_on_compute_lane : st_.transfers_on_transfer_lane);
    self_->request(lane, caf::infinite, transfer_atom::value, std::move(job))
      .then([self = self_](transfer_done_ptr done) { scheduler_logic{self}.on_transfer_done(*done); },
            [self = self_](caf::error& err) {
              self->state.log->critical("model '{}': transfer lane failed: {}",
                                        self->state.setup.model, caf::to_string(err));
              self->quit(err);
            });
  }

  void maybe_step() {
    if (st_.step_in_flight)
      return;
    std::vector<sequence*> decodes, prefills;
    for (auto& [id, s] : st_.seqs) {
      if (s->state != seq_state::resident || s->cancelled || s->in_step)
        continue;
      (s->kv_len + 1 == s->tokens.size() ? decodes : prefills).push_back(s.get());
    }
    if (decodes.empty() && prefills.empty())
      return;
    auto by_rank = [](auto* a, auto* b) {
      return std::tie(a->cls, a->level, a->turn) < std::tie(b->cls, b->level, b->turn);
    };
    std::sort(prefills.begin(), prefills.end(), by_rank);
    std::sort(decodes.begin(), decodes.end(), [](auto* a, auto* b) { return a->id < b->id; });

    auto plan = std::make_shared<step_plan>();
    plan->number = ++st_.step_number;
    std::uint32_t budget = st_.max_step_tokens ? st_.max_step_tokens : UINT32_MAX;
    auto add_row = [&](sequence& s, std::uint32_t n) {
      plan->seqs.push_back(s.id);
      plan->tokens.emplace_back(s.tokens.begin() + s.kv_len, s.tokens.begin() + s.kv_len + n);
      s.in_step = true;
      budget -= std::min(budget, n);
    };
    for (auto* s : decodes)
      add_row(*s, 1);
    for (auto* s : prefills) {
      auto left = static_cast<std::uint32_t>(s->tokens.size()) - s->kv_len;
      auto n = std::min({left, st_.info.max_prefill_chunk, budget});
      if (n == 0)
        break;
      st_.stats.prefill_tokens += n;
      add_row(*s, n);
    }
    for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
      auto* s = find(plan->seqs[i]);
      plan->rows.push_back({*s->slot, s->kv_len, plan->tokens[i]});
    }
    st_.step_in_flight = true;
    st_.step_started = clock::now();
    self_->request(st_.compute, caf::infinite, step_atom::value, std::move(plan))
      .then([self = self_](step_done_ptr done) { scheduler_logic{self}.on_step_done(*done); },
            [self = self_](caf::error& err) {
              self->state.log->critical("model '{}': compute lane failed: {}",
                                        self->state.setup.model, caf::to_string(err));
              self->quit(err);
            });
  }

  scheduler_actor* self_;
  scheduler_state& st_;
};

} // namespace

std::string_view to_string(seq_phase p) noexcept {
  switch (p) {
    case seq_phase::queued: return "queued";
    case seq_phase::resident: return "resident";
    case seq_phase::dumping: return "dumping";
    case seq_phase::parked: return "parked";
    case seq_phase::loading: return "loading";
    case seq_phase::ended: return "ended";
  }
  return "unknown";
}

namespace {

// Knobs that may change while sequences run (kvlane reload).
void apply_policy(scheduler_state& st, const actors::scheduler_policy& p) {
  st.quantum = std::max(1u, p.quantum_steps);
  st.levels = std::max(1u, p.levels);
  st.max_step_tokens = p.max_step_tokens;
  st.aging_steps = p.aging_steps;
  st.spare = p.spare_slots;
  st.costs.set_alpha(p.ewma_alpha);
}

caf::behavior scheduler_behavior(scheduler_actor* self, scheduler_setup setup) {
  auto& st = self->state;
  st.log = logging::get("scheduler");
  st.info = setup.backend->info();
  st.mode = setup.policy.mode;
  st.slot_owner.assign(st.info.slots, std::nullopt);
  st.fallback = st.mode == scheduler_mode::overlap && !st.info.caps.transfer_overlaps_compute;
  st.serialized = st.mode == scheduler_mode::sync || st.fallback;
  apply_policy(st, setup.policy);
  if (st.fallback)
    st.log->info("model '{}': backend cannot overlap transfers with compute; "
                 "using serialized switches with 4x longer quanta below level 0",
                 setup.model);
  st.compute = spawn_lane(self->system(), setup.model + "/compute", setup.backend, setup.store,
                          setup.compute_heartbeat);
  st.transfer = spawn_lane(self->system(), setup.model + "/transfer", setup.backend, setup.store,
                           setup.transfer_heartbeat);
  self->link_to(st.compute);
  self->link_to(st.transfer);
  st.setup = std::move(setup);
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      self->state.log->critical("scheduler '{}': {}", self->state.setup.model, x.what());
    } catch (...) {
      self->state.log->critical("scheduler '{}': unknown exception", self->state.setup.model);
    }
    return caf::sec::runtime_error;
  });
  return {
    [self](submit_atom, submission_ptr s) { scheduler_logic{self}.on_submit(*s); },
    [self](cancel_atom, seq_id id) { scheduler_logic{self}.on_cancel(id, "cancelled"); },
    [self](stats_atom) -> scheduler_stats_ptr {
      return std::make_shared<const scheduler_stats>(scheduler_logic{self}.snapshot_stats());
    },
    [self](policy_atom, actors::scheduler_policy p) -> bool {
      apply_policy(self->state, p);
      self->state.log->info("model '{}': policy updated: quantum {}, levels {}, spare slots {}, "
                            "max step tokens {}, aging steps {}",
                            self->state.setup.model, self->state.quantum, self->state.levels,
                            self->state.spare, self->state.max_step_tokens,
                            self->state.aging_steps);
      scheduler_logic{self}.reschedule();
      return true;
    },
    [self](list_atom) -> sequence_list_ptr {
      return std::make_shared<const std::vector<sequence_info>>(scheduler_logic{self}.list());
    },
    [self](shutdown_atom, std::string why) -> bool {
      scheduler_logic{self}.on_shutdown(why);
      return true;
    },
  };
}

} // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, scheduler_setup setup) {
  return sys.spawn(scheduler_behavior, std::move(setup));
}

} // namespace kvlane::actors
