#include "actors/scheduler.hpp"

#include "actors/cost_model.hpp"
#include "actors/exception_handler.hpp"
#include "actors/fault_policy.hpp"
#include "actors/kv_keeper.hpp"
#include "actors/lane.hpp"
#include "actors/mlfq_policy.hpp"
#include "actors/overlap_meter.hpp"
#include "actors/sequence_table.hpp"
#include "actors/slot_planner.hpp"
#include "actors/step_composer.hpp"
#include "actors/transfer_tracker.hpp"
#include "common/elapsed.hpp"
#include "common/logging.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <stdexcept>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;
using actors::scheduler_mode;

/// Stands for "a retained entry" in the owners the slot planner sees.
constexpr seq_id retained_owner = 0;

/// The scheduler's note to itself: plan the submits that arrived in a burst.
using replan_atom = caf::atom_constant<caf::atom("replan")>;

/// The scheduler's timer while the device is failing: the backoff is over.
using probe_atom = caf::atom_constant<caf::atom("probe")>;
/// The idle-expiry timer of retained KV; carries the ticket it was armed with.
using expire_atom = caf::atom_constant<caf::atom("expire")>;

struct scheduler_state {
  static inline const char* name = "scheduler";

  scheduler_setup setup;
  backends::backend_info info;
  std::shared_ptr<spdlog::logger> log;
  lane_actor compute;
  lane_actor transfer;
  scheduler_mode mode = scheduler_mode::overlap;
  actors::mode_rules rules; ///< what the mode decides (actors/policy)
  bool serialized = false; ///< transfers share the compute lane (sync, or no overlap)
  bool fallback = false;   ///< overlap mode on a backend that cannot overlap
  mlfq_policy mlfq;
  sequence_table seqs;           ///< the live sequences, their slots and rank order
  std::optional<kv_keeper> kv;   ///< retained entries and parked snapshots (set at start)
  transfer_tracker transfers;    ///< dumps and loads in flight
  std::uint32_t max_step_tokens = 0;
  bool batch_prefill_yields = false;
  std::uint32_t spare = 1;

  std::uint64_t step_number = 0;
  bool step_in_flight = false;
  clock::time_point step_started;
  cost_model costs;
  scheduler_stats stats;
  bool shutting_down = false;
  bool replan_queued = false; ///< a replan_atom is in the mailbox
  bool plan_stale = false;    ///< submits arrived since the last plan

  overlap_meter overlap; ///< how much transfer time the steps hid

  fault_policy faults;            ///< what failed steps lead to (actors/fault_policy)
  bool probe_timer_armed = false; ///< a probe_atom is on its way
  std::string last_step_error;    ///< the backend's message for the last failed step

  std::uint64_t expiry_ticket = 0; ///< the armed expiry timer's; older ones are stale
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
    seq->position = st_.mlfq.enter(s.priority, seq->prompt_len);
    auto& added = st_.seqs.add(std::move(seq), s.fairness_unit.empty() ? s.client : s.fairness_unit);
    ++st_.stats.submitted;
    notify(added, seq_phase::queued);
    schedule_after_burst();
  }

  void on_cancel(seq_id id, std::string_view why) {
    auto* s = find(id);
    if (!s)
      return;
    switch (s->state) {
      case kv_state::queued:
        finish(*s, end_reason::cancelled, std::string{why});
        break;
      case kv_state::parked:
        st_.kv->release(s->id);
        finish(*s, end_reason::cancelled, std::string{why});
        break;
      case kv_state::resident:
        if (s->in_step) {
          mark_cancelled(*s);
        } else {
          release_slot(*s);
          finish(*s, end_reason::cancelled, std::string{why});
        }
        break;
      case kv_state::dumping:
      case kv_state::loading:
        mark_cancelled(*s); // completed in on_transfer_done
        break;
    }
    schedule();
  }

  /// The consumer matched a stop string after `generated` tokens; the KV of
  /// the prompt and the first `keep` of them stays for reuse. A sequence that
  /// ended already, or was cancelled, is left alone.
  void on_stop(seq_id id, std::uint32_t generated, std::uint32_t keep) {
    auto* s = find(id);
    if (!s || s->cancelled)
      return;
    if (s->in_step || s->state == kv_state::dumping || s->state == kv_state::loading) {
      mark_cancelled(*s); // no longer planned; completed when the lane replies
      s->stop_at = std::pair{generated, keep};
      return;
    }
    stop_now(*s, generated, keep);
    schedule();
  }

  void on_step_done(step_done& done) {
    st_.step_in_flight = false;
    const double ms = ms_between(done.start, done.end);
    auto& plan = *done.plan;
    if (done.error) {
      on_step_failed(plan, *done.error);
      return;
    }

    std::uint32_t total_tokens = 0;
    for (auto& row : plan.rows)
      total_tokens += static_cast<std::uint32_t>(row.tokens.size());
    st_.costs.observe_step(total_tokens, ms);
    ++st_.stats.steps;
    st_.stats.step_busy_ms += ms;
    st_.overlap.add_step(done.start, done.end);

    // Before the rows are processed: a row that ends below must not end the
    // fault policy's isolation round as if it had not run.
    const auto before = st_.faults.health();
    auto verdict = st_.faults.step_succeeded(plan.seqs, clock::now());
    note_health(before);
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      auto* s = find(plan.seqs[i]);
      if (!s)
        continue;
      s->in_step = false;
      s->kv_len += static_cast<std::uint32_t>(plan.rows[i].tokens.size());
      if (s->cancelled) {
        end_marked(*s);
        continue;
      }
      charge_step(*s);
      if (s->kv_len < s->tokens.size())
        continue; // a prefill chunk that is not the last one
      auto tok = s->smp.sample(done.out.row(i));
      if (s->smp.is_stop(tok)) {
        retain_or_release(*s);
        finish(*s, end_reason::stop, {});
        continue;
      }
      s->tokens.push_back(tok);
      st_.seqs.note_head(*s);
      ++s->generated;
      ++st_.stats.tokens_generated;
      if (s->smp.params().logprobs)
        self_->send(s->session, tokens_atom::value, std::vector<token_id>{tok},
                    std::vector<token_logprobs>{s->smp.last_logprobs()});
      else
        self_->send(s->session, tokens_atom::value, std::vector<token_id>{tok});
      if (s->generated >= s->smp.params().max_tokens) {
        retain_or_release(*s);
        finish(*s, end_reason::length, {});
      }
    }
    apply_fault_actions(verdict);
    if (st_.mlfq.ages())
      st_.seqs.age(st_.mlfq.knobs().aging_steps);
    schedule();
  }

  void on_probe() {
    st_.probe_timer_armed = false;
    schedule();
  }

  void on_transfer_done(transfer_done& done) {
    st_.transfers.finished(done.job);
    const double ms = ms_between(done.start, done.end);
    st_.stats.transfer_ms += ms;
    st_.stats.transfer_hidden_ms += hidden_ms(done.start, done.end);
    auto bytes = st_.setup.backend->snapshot_size(done.job.cache_len);
    auto* s = find(done.job.seq);
    const bool dump = done.job.kind == transfer_kind::dump;
    (dump ? st_.stats.dump_ms_total : st_.stats.load_ms_total) += ms;
    if (dump && done.job.retained != 0) {
      ++st_.stats.dumps;
      if (done.error) {
        ++st_.stats.dump_failures;
        st_.log->warn("model '{}': retained KV {} could not be stored: {}", st_.setup.model,
                      done.job.retained, *done.error);
      } else {
        st_.costs.observe_dump(bytes, ms);
      }
      st_.kv->retained_dump_done(done.job, !done.error);
      schedule();
      return;
    }
    if (dump) {
      ++st_.stats.dumps;
      if (!s) {
        st_.kv->dump_done(done.job.seq, done.job, false); // frees the snapshot
        return;
      }
      release_slot(*s);
      if (done.error) {
        ++st_.stats.dump_failures;
        st_.log->warn("model '{}': sequence {} will recompute: {}", st_.setup.model, s->id,
                      *done.error);
        st_.kv->dump_done(s->id, done.job, false);
        drop_kv(*s);
      } else {
        st_.costs.observe_dump(bytes, ms);
        st_.kv->dump_done(s->id, done.job, true);
        set_state(*s, kv_state::parked);
      }
      if (s->cancelled)
        end_marked(*s);
    } else {
      ++st_.stats.loads;
      st_.kv->load_done(done);
      if (!s) {
        schedule();
        return;
      }
      if (done.error) {
        ++st_.stats.load_failures;
        st_.log->warn("model '{}': sequence {} will recompute: {}", st_.setup.model, s->id,
                      *done.error);
        // Keep the slot: the recompute starts in it from position 0.
        s->kv_len = 0;
        ++st_.stats.recomputes;
      } else {
        st_.costs.observe_load(bytes, ms);
        // A retained snapshot may cover more than the prompt shares with it:
        // roll back to the match and prefill the rest.
        s->kv_len = done.job.keep_snapshot ? s->reuse_len : done.job.cache_len;
        if (done.job.keep_snapshot) {
          st_.kv->count_stored_hit(s->reuse_len);
          s->reused = s->reuse_len;
        }
      }
      s->reuse_len = 0;
      set_state(*s, kv_state::resident);
      if (s->cancelled)
        end_marked(*s);
    }
    schedule();
  }

  void reschedule() { schedule(); }

  void apply_reuse(const reuse_policy& p) {
    st_.kv->set_reuse(p);
    arm_expiry();
  }

  /// Arms the timer for the moment the least recently used retained entry
  /// outlives the idle TTL, so retained KV expires on time on a model that
  /// has nothing else to do (expiry at scheduling events alone would keep it
  /// forever there). At most one timer counts: the earliest armed.
  void arm_expiry() {
    const auto due = st_.kv->expiry_to_arm();
    if (!due)
      return;
    // idle_since() counts an entry idle once strictly past the TTL.
    const auto in = std::max(*due - clock::now(), clock::duration::zero()) + std::chrono::milliseconds(1);
    self_->delayed_send(self_, std::chrono::ceil<std::chrono::milliseconds>(in), expire_atom::value,
                        ++st_.expiry_ticket);
  }

  void on_expiry_timer(std::uint64_t ticket) {
    if (ticket != st_.expiry_ticket)
      return; // an earlier deadline replaced this timer
    st_.kv->expiry_fired();
    if (st_.kv->expire_idle(clock::now(), true))
      schedule(); // freed slots may admit waiting sequences
    arm_expiry();
  }

  void on_shutdown(const std::string& why) {
    st_.shutting_down = true;
    st_.kv->drop_all();
    for (auto id : st_.seqs.ids()) {
      auto* s = find(id);
      if (!s)
        continue;
      // Lanes still working on a sequence hold its slot; the store pages of a
      // parked one go back now. Nothing is waited for: the streams end here.
      if (s->state == kv_state::parked)
        st_.kv->release(id);
      if (s->state == kv_state::resident && !s->in_step)
        release_slot(*s);
      auto& seq = *s;
      finish_stream(seq, end_reason::cancelled, why);
      if (seq.state == kv_state::dumping || seq.state == kv_state::loading || seq.in_step) {
        mark_cancelled(seq);
        seq.stop_at.reset(); // its stream ended as cancelled just above
        seq.session = {};
      } else {
        notify(seq, seq_phase::ended);
        st_.seqs.erase(id);
      }
    }
  }

  // -- figures and the admin (actors/scheduler_report, kvlane cache drop) ------

  std::vector<sequence_info> list() const {
    return list_sequences(st_.seqs, st_.setup.model, clock::now());
  }

  scheduler_stats snapshot_stats() const {
    return report_stats(st_.stats, st_.info, st_.seqs, st_.costs, st_.faults, *st_.kv,
                        clock::now());
  }

  std::vector<retained_info> retained_list() const {
    return list_retained(*st_.kv, st_.setup.model, clock::now());
  }

  /// Removes the selected entries and frees what they hold. Slots free at
  /// once, except those being dumped (freed, with their snapshot, when the
  /// dump ends).
  retained_drop_result drop_retained(const retained_drop_request& req) {
    const auto out = st_.kv->drop(req);
    if (out.entries > 0)
      st_.log->info("model '{}': dropped {} retained entries on request ({} slots, {} snapshots, "
                    "{} store bytes)",
                    st_.setup.model, out.entries, out.slots, out.snapshots, out.store_bytes);
    return out;
  }

private:
  // -- helpers -------------------------------------------------------------------

  sequence* find(seq_id id) const { return st_.seqs.find(id); }

  /// The sequences that hold a slot (resident, dumping or loading), by slot.
  std::vector<sequence*> slot_holders() const { return st_.seqs.slot_holders(); }

  /// Charges a step the sequence ran in; it may drop a level and take a new turn.
  void charge_step(sequence& s) {
    const auto before = s.position;
    st_.mlfq.charge_step(s.position);
    st_.seqs.moved(s, before);
  }

  /// A cancelled sequence stays until the lane working on it replies, but is
  /// no longer ranked or aged.
  void mark_cancelled(sequence& s) {
    s.cancelled = true;
    st_.seqs.unrank(s);
  }

  /// Ends a sequence marked while a lane worked on it, now that none does
  /// (it is queued, resident or parked): as its stop, or as cancelled.
  void end_marked(sequence& s) {
    if (s.stop_at) {
      stop_now(s, s.stop_at->first, s.stop_at->second);
      return;
    }
    if (s.state == kv_state::parked)
      st_.kv->release(s.id);
    release_slot(s);
    finish(s, end_reason::cancelled, "cancelled");
  }

  /// Ends `s` as a sampled stop token after its first `generated` tokens
  /// would: the tokens it made past them are dropped (the slot's positions
  /// past the kept length are simply overwritten by the next user: a rollback
  /// is a shorter cache_len), and its KV up to the prompt plus `keep` tokens
  /// is retained when it sits in a slot. A parked sequence's snapshot is freed
  /// (retention keeps warm KV only); a queued one holds no KV.
  void stop_now(sequence& s, std::uint32_t generated, std::uint32_t keep) {
    s.generated = std::min(s.generated, generated);
    const auto kept = s.prompt_len + std::min(keep, s.generated);
    if (s.tokens.size() > kept)
      s.tokens.resize(kept);
    s.kv_len = std::min<std::uint32_t>(s.kv_len, kept);
    if (s.state == kv_state::parked)
      st_.kv->release(s.id);
    if (s.state == kv_state::resident)
      retain_or_release(s);
    else
      release_slot(s);
    finish(s, end_reason::stop, {});
  }

  double hidden_ms(clock::time_point a, clock::time_point b) const {
    if (st_.serialized)
      return 0; // transfers run on the compute lane: nothing is hidden
    return st_.overlap.hidden_ms(a, b, st_.step_in_flight
                                         ? std::optional<clock::time_point>{st_.step_started}
                                         : std::nullopt);
  }

  std::uint8_t snapshot_priority(const sequence& s) const {
    // Interactive above batch; within a class, higher levels (long runners)
    // are cheaper to lose.
    auto base = s.position.cls == priority_class::interactive ? 128 : 0;
    return static_cast<std::uint8_t>(base + 64 - std::min(s.position.level, 63u));
  }

  void notify(const sequence& s, seq_phase phase) {
    if (st_.setup.observer)
      st_.setup.observer(st_.setup.model, s.id, phase);
  }

  void set_state(sequence& s, kv_state state) {
    st_.seqs.set_state(s, state);
    notify(s, phase_of(state));
  }

  void release_slot(sequence& s) { st_.seqs.release_slot(s); }

  void drop_kv(sequence& s) {
    set_state(s, kv_state::queued);
    s.kv_len = 0;
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
    end.cached_tokens = std::min(s.reused, s.prompt_len);
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
    const auto id = s.id;
    st_.seqs.erase(id); // `s` dies here
    forget_faults_of(id);
  }

  // -- what the KV keeper decides (actors/kv_keeper) -------------------------------

  /// Parked sequences whose snapshot the store evicted recompute.
  void drop_lost(const std::vector<seq_id>& lost) {
    for (const auto id : lost)
      if (auto* s = find(id); s && s->state == kv_state::parked)
        drop_kv(*s);
  }

  void carry_out(kv_jobs jobs) {
    drop_lost(jobs.lost);
    for (auto& job : jobs.transfers)
      send_transfer(std::move(job));
  }

  /// How many of the ranked sequences the planner will want in slots.
  std::size_t target_size() const {
    const auto slots = st_.info.slots;
    if (st_.mode == scheduler_mode::fcfs || slots == 0)
      return slots;
    return std::max(1u, slots - std::min(st_.spare, slots - 1));
  }

  std::uint32_t spare_wanted() const {
    const auto slots = st_.info.slots;
    if (st_.mode == scheduler_mode::fcfs || slots == 0)
      return 0;
    return std::min(st_.spare, slots - 1);
  }

  /// A request that ended normally leaves its KV warm in its slot.
  void retain_or_release(sequence& s) {
    if (!s.slot || st_.shutting_down) {
      release_slot(s);
      return;
    }
    const slot_id slot = *s.slot;
    const bool kept = st_.kv->retain(s.owner, s.session_name, std::span(s.tokens).first(s.kv_len),
                                     slot, clock::now());
    release_slot(s);
    if (kept)
      arm_expiry();
  }

  /// `s` continues from `length` positions of retained KV in `slot`.
  void start_warm(sequence& s, slot_id slot, std::uint32_t length) {
    st_.seqs.take_slot(s, slot);
    s.kv_len = length;
    s.reused = length;
    set_state(s, kv_state::resident);
  }

  // Queued sequences whose prefix sits warm in a slot take that slot now,
  // before any warm slot is reclaimed: the KV they need is already on the
  // device. One outside the target is then an ordinary resident the planner
  // may preempt (a swap keeps its KV as a parked sequence's, worth more than
  // a retained one's). Only a sequence whose first reuse block is a warm
  // entry's can hit; the search ends when no slot is warm. `limit`: the best
  // `limit` sequences only (0: all).
  void take_warm_hits(std::size_t limit) {
    if (st_.kv->reuse().mode == reuse_mode::off || !st_.kv->any_warm())
      return;
    const auto heads = st_.kv->warm_heads();
    st_.seqs.for_each_with_head(heads, limit, [&](seq_id id) {
      auto& s = *find(id);
      if (s.state != kv_state::queued || !s.head
          || !std::binary_search(heads.begin(), heads.end(), *s.head))
        return true;
      if (auto m = st_.kv->find_reusable(s.owner, s.tokens); m && m->slot) {
        start_warm(s, st_.kv->take_warm(*m, clock::now()), m->length);
        return st_.kv->any_warm();
      }
      return true;
    });
  }

  // Warm slots go before any live sequence is evicted: for every target
  // sequence without a slot and for the spare (kv_keeper::reclaim_warm).
  void reclaim_warm(const std::vector<sequence*>& order) {
    std::uint32_t waiting = 0;
    for (std::size_t i = 0; i < order.size() && i < target_size(); ++i)
      waiting += order[i]->state == kv_state::queued || order[i]->state == kv_state::parked;
    std::uint32_t free = 0;
    const auto owners = st_.seqs.owners();
    for (slot_id i = 0; i < owners.size(); ++i)
      free += !owners[i] && !st_.kv->warm_in(i);
    carry_out(st_.kv->reclaim_warm(waiting + spare_wanted(), free, st_.transfers.promised_slots(),
                                   st_.transfers.pending()));
  }

  /// A queued sequence just given `s.slot` starts from retained KV if it can.
  bool reuse_retained(sequence& s) {
    auto start =
      st_.kv->start_from_retained(s.id, s.owner, s.tokens, *s.slot, st_.costs, clock::now());
    switch (start.how) {
      case reuse_start::kind::prefill:
        return false;
      case reuse_start::kind::warm:
        release_slot(s); // the planner sees the warm slot as held: swapping is safe
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

  // -- the planner -----------------------------------------------------------------

  // While a step fault is being handled nothing is admitted or preempted
  // (the rows under retry or isolation keep their slots); a failing device
  // with no resident sequence admits one, for the probe step.
  void schedule() {
    st_.plan_stale = false;
    if (!st_.shutting_down) {
      if (st_.faults.admits())
        plan_slots();
      else if (probe_needs_a_sequence())
        plan_slots(1);
    }
    maybe_step();
  }

  // A burst of submits is planned once, not once per submit: a submit only
  // marks the plan stale and queues a note behind what is in the mailbox. Any
  // other event plans first (catch_up), so none is handled against a stale
  // plan; the submits of a burst are ranked together.
  void schedule_after_burst() {
    st_.plan_stale = true;
    if (st_.replan_queued)
      return;
    st_.replan_queued = true;
    self_->send(self_, replan_atom::value);
  }

public:
  /// Plans now if submits left the plan stale.
  void catch_up() {
    if (st_.plan_stale)
      schedule();
  }

  void on_replan() {
    st_.replan_queued = false;
    catch_up();
  }

private:

  // Carries out the planner's decisions as it makes them.
  class planned_actions final : public slot_actions {
  public:
    explicit planned_actions(scheduler_logic& logic) : logic_(logic) {}
    kv_state admit(seq_id id, slot_id slot) override {
      auto& s = *logic_.find(id);
      logic_.admit(s, slot);
      return s.state;
    }
    kv_state evict(seq_id id, eviction how) override {
      auto& s = *logic_.find(id);
      logic_.evict(s, how);
      return s.state;
    }

  private:
    scheduler_logic& logic_;
  };

  /// Plans slots for the `limit` best ranked sequences (0: all).
  //
  // The planner admits only its target set and otherwise looks at residents
  // (plan_target_size), so it is given the best of the rank index and then
  // the residents outside them in their rank order: O(slots log n), not a
  // pass over every live sequence.
  void plan_slots(std::size_t limit = 0) {
    (void)st_.kv->expire_idle(clock::now(), false);
    const auto spare_slots = st_.rules.keeps_spare ? st_.spare : 0;
    const auto target = plan_target_size(st_.info.slots, spare_slots, st_.rules.preempts);
    auto order = st_.seqs.best_ranked(limit != 0 ? std::min(limit, target) : target);
    take_warm_hits(limit);
    reclaim_warm(order);
    if (limit == 0)
      for (auto* s : st_.seqs.residents_in_rank_order(order))
        order.push_back(s);
    std::vector<slot_candidate> candidates;
    candidates.reserve(order.size());
    for (auto* s : order) {
      slot_candidate c{s->id, s->state, s->slot, s->in_step, false};
      if (s->state == kv_state::resident && !s->in_step)
        c.recompute_cheaper = would_recompute(*s);
      candidates.push_back(c);
    }
    // A warm slot is held for the planner; reclaim_warm freed what it needs.
    std::vector<std::optional<seq_id>> owners(st_.seqs.owners().begin(), st_.seqs.owners().end());
    for (slot_id i = 0; i < owners.size(); ++i)
      if (st_.kv->warm_in(i))
        owners[i] = retained_owner;
    slot_plan_input in;
    in.ranked = candidates;
    in.owners = owners;
    in.dumping = st_.transfers.promised_slots();
    in.transfers_pending = st_.transfers.pending();
    in.spare_slots = spare_slots;
    in.preemptive = st_.rules.preempts;
    planned_actions actions{*this};
    actors::plan_slots(in, actions);
  }

  bool would_recompute(const sequence& s) const {
    // A device without snapshots (caps.snapshots = false) can only recompute.
    return s.kv_len == 0 || !st_.rules.swaps || !st_.info.caps.snapshots
           || st_.costs.prefer_recompute(s.kv_len, st_.setup.backend->snapshot_size(s.kv_len),
                                         st_.serialized);
  }

  void evict(sequence& s, eviction how) {
    ++st_.stats.preemptions;
    ++s.preemptions;
    if (how == eviction::recompute) {
      release_slot(s);
      drop_kv(s);
      return;
    }
    std::string why;
    auto jobs = st_.kv->swap_out(s.id, *s.slot, s.kv_len, s.generation + 1, snapshot_priority(s),
                                 why);
    if (jobs.transfers.empty()) {
      // No room even after eviction: recompute instead (never fail the request).
      st_.log->debug("model '{}': store cannot hold sequence {} ({} bytes): {}; recomputing",
                     st_.setup.model, s.id, st_.kv->snapshot_size(s.kv_len), why);
      release_slot(s);
      drop_kv(s);
      return;
    }
    drop_lost(jobs.lost);
    ++st_.stats.swaps;
    ++s.generation;
    set_state(s, kv_state::dumping);
    for (auto& job : jobs.transfers)
      send_transfer(std::move(job));
  }

  void admit(sequence& s, slot_id slot) {
    st_.seqs.take_slot(s, slot);
    if (s.state == kv_state::queued) {
      s.kv_len = 0;
      s.reused = 0;
      if (reuse_retained(s))
        return;
      set_state(s, kv_state::resident); // prefill (or recompute) from position 0
      return;
    }
    // Parked: the snapshot may have been evicted for another model or sequence.
    auto jobs = st_.kv->restore(s.id, slot, s.kv_len, s.generation);
    if (jobs.transfers.empty()) {
      drop_kv(s);
      set_state(s, kv_state::resident);
      return;
    }
    set_state(s, kv_state::loading);
    carry_out(std::move(jobs));
  }

  void send_transfer(transfer_job_ptr job) {
    auto& lane = st_.transfers.lane() == transfer_lane::compute ? st_.compute : st_.transfer;
    st_.transfers.started(*job);
    self_->request(lane, caf::infinite, transfer_atom::value, std::move(job))
      .then(
        [self = self_](transfer_done_ptr done) {
          scheduler_logic logic{self};
          logic.catch_up();
          logic.on_transfer_done(*done);
        },
        [self = self_](caf::error& err) {
          self->state.log->critical("model '{}': transfer lane failed: {}", self->state.setup.model,
                                    caf::to_string(err));
          self->quit(err);
        });
  }

  void maybe_step() {
    if (st_.step_in_flight)
      return;
    const auto now = clock::now();
    const auto next = st_.faults.next(now);
    if (next.what == next_step::kind::wait) {
      arm_probe_timer(next.until - now);
      return;
    }
    // A retry runs the failed step's rows again, an isolation step one of them.
    const bool only_listed = next.what != next_step::kind::compose;
    std::vector<step_candidate> candidates;
    for (auto* s : slot_holders()) {
      const auto id = s->id;
      if (s->state != kv_state::resident || s->cancelled || s->in_step)
        continue;
      if (only_listed && std::find(next.rows.begin(), next.rows.end(), id) == next.rows.end())
        continue;
      candidates.push_back(
        {id, &s->position, s->kv_len, static_cast<std::uint32_t>(s->tokens.size())});
    }
    if (only_listed && candidates.empty()) {
      // Every sequence that leaves its slot is forgotten by the policy, so
      // this cannot happen; if it does, end the episode rather than stall.
      st_.log->error("model '{}': the rows to {} are not resident; resuming normal steps",
                     st_.setup.model, next.what == next_step::kind::retry ? "retry" : "isolate");
      for (auto id : next.rows)
        apply_fault_actions(st_.faults.forget(id, now));
      maybe_step();
      return;
    }
    auto rows = compose_step(candidates, {st_.max_step_tokens, st_.info.max_prefill_chunk,
                                          st_.batch_prefill_yields});
    if (rows.empty())
      return;

    auto plan = std::make_shared<step_plan>();
    plan->number = ++st_.step_number;
    for (auto& row : rows) {
      auto& s = *find(row.id);
      if (row.prefill)
        st_.stats.prefill_tokens += row.tokens;
      s.in_step = true;
      auto from = s.tokens.begin() + s.kv_len;
      plan->seqs.push_back(s.id);
      plan->tokens.emplace_back(from, from + row.tokens);
    }
    // The rows' spans point into plan->tokens, complete from here on.
    for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
      auto& s = *find(plan->seqs[i]);
      plan->rows.push_back({*s.slot, s.kv_len, plan->tokens[i]});
    }
    st_.step_in_flight = true;
    st_.step_started = clock::now();
    self_->request(st_.compute, caf::infinite, step_atom::value, std::move(plan))
      .then(
        [self = self_](step_done_ptr done) {
          scheduler_logic logic{self};
          logic.catch_up();
          logic.on_step_done(*done);
        },
        [self = self_](caf::error& err) {
          self->state.log->critical("model '{}': compute lane failed: {}", self->state.setup.model,
                                    caf::to_string(err));
          self->quit(err);
        });
  }

  // -- step faults (actors/fault_policy, docs/scheduling.md "Failures") --------

  void on_step_failed(const step_plan& plan, const backends::backend_error& error) {
    ++st_.stats.step_failures;
    st_.last_step_error = error.message;
    const auto before = st_.faults.health();
    auto actions = st_.faults.step_failed(plan.seqs, clock::now());
    st_.log->warn("model '{}': step {} with {} rows failed: {} ({}); device {}", st_.setup.model,
                  plan.number, plan.seqs.size(), error.message, backends::to_string(error.code),
                  to_string(st_.faults.health()));
    note_health(before);
    // The backend advanced no slot: the same rows can run again.
    for (auto id : plan.seqs) {
      auto* s = find(id);
      if (!s)
        continue;
      s->in_step = false;
      if (s->cancelled)
        end_marked(*s);
    }
    apply_fault_actions(actions);
    schedule();
  }

  void note_health(device_health before) {
    const auto now = st_.faults.health();
    if (now == before)
      return;
    if (now == device_health::failing)
      st_.log->error("model '{}': the device fails every row alone; admission paused, next "
                     "step in {} ms",
                     st_.setup.model, st_.faults.backoff().count());
    else
      st_.log->info("model '{}': device {} (was {})", st_.setup.model, to_string(now),
                    to_string(before));
  }

  void apply_fault_actions(const fault_actions& actions) {
    for (auto id : actions.recompute) {
      auto* s = find(id);
      if (!s || s->state != kv_state::resident || s->in_step)
        continue;
      st_.log->warn("model '{}': sequence {} failed alone in a step; recomputing it: {}",
                    st_.setup.model, id, st_.last_step_error);
      release_slot(*s);
      drop_kv(*s);
    }
    for (const auto& f : actions.fail_row)
      fail_for_fault(f.id, fmt::format("the NPU failed this request's step row {} times when it "
                                       "ran alone, recomputing it in between: {}",
                                       f.failures, st_.last_step_error));
    for (const auto& f : actions.fail_device)
      fail_for_fault(f.id, fmt::format("the NPU failed {} steps in a row that carried this "
                                       "request, backing off in between: {}",
                                       f.failures, st_.last_step_error));
  }

  void fail_for_fault(seq_id id, std::string message) {
    auto* s = find(id);
    if (!s || s->in_step || s->state != kv_state::resident)
      return;
    st_.log->warn("model '{}': sequence {} fails: {}", st_.setup.model, id, message);
    release_slot(*s);
    finish(*s, end_reason::error, std::move(message));
  }

  void forget_faults_of(seq_id id) {
    apply_fault_actions(st_.faults.forget(id, clock::now()));
  }

  bool probe_needs_a_sequence() const {
    if (st_.faults.health() != device_health::failing || st_.step_in_flight
        || st_.faults.next(clock::now()).what == next_step::kind::wait)
      return false;
    for (auto* s : slot_holders())
      if (s->state == kv_state::resident || s->state == kv_state::loading)
        return false;
    return true;
  }

  void arm_probe_timer(clock::duration in) {
    if (st_.probe_timer_armed)
      return;
    st_.probe_timer_armed = true;
    self_->delayed_send(self_, std::chrono::ceil<std::chrono::microseconds>(in),
                        probe_atom::value);
  }

  scheduler_actor* self_;
  scheduler_state& st_;
};

// Knobs that may change while sequences run (kvlane reload).
void apply_policy(scheduler_state& st, const actors::scheduler_policy& p) {
  st.mlfq.set_knobs({p.quantum_steps, p.levels, p.aging_steps});
  st.max_step_tokens = p.max_step_tokens;
  st.batch_prefill_yields = p.batch_prefill_yields;
  st.spare = p.spare_slots;
  st.costs.set_alpha(p.ewma_alpha);
  st.costs.fix(p.fixed_costs);
  st.faults.set_knobs(p.faults);
}

caf::behavior scheduler_behavior(scheduler_actor* self, scheduler_setup setup) {
  auto& st = self->state;
  st.log = logging::get("scheduler");
  st.info = setup.backend->info();
  st.mode = setup.policy.mode;
  st.rules = actors::rules_of(st.mode);
  st.stats.model = setup.model;
  st.stats.mode = st.mode;
  st.seqs = sequence_table{st.rules.order, st.info.slots};
  st.kv.emplace(kv_keeper_setup{setup.store, st.info.identity, setup.model_index, st.info.slots,
                                st.info.caps.snapshots,
                                [backend = setup.backend](std::uint32_t cache_len) {
                                  return std::uint64_t{backend->snapshot_size(cache_len)};
                                }},
                setup.reuse);
  const auto placement = place_transfers(st.mode, st.info.caps.transfer_overlaps_compute);
  st.fallback = placement.fallback;
  st.serialized = placement.on_compute_lane;
  st.transfers = transfer_tracker{st.serialized};
  st.mlfq = mlfq_policy{{st.rules.order, placement.long_quanta, st.info.max_prefill_chunk}, {}};
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
  self->set_exception_handler(log_and_stop("scheduler", spdlog::level::critical,
                                           "scheduler '" + self->state.setup.model + "'"));
  // Every handler but a submit plans first if submits left the plan stale
  // (catch_up), so none is handled against a stale plan.
  return {
    [self](submit_atom, submission_ptr s) { scheduler_logic{self}.on_submit(*s); },
    [self](replan_atom) { scheduler_logic{self}.on_replan(); },
    [self](expire_atom, std::uint64_t ticket) {
      scheduler_logic logic{self};
      logic.catch_up();
      logic.on_expiry_timer(ticket);
    },
    [self](probe_atom) {
      scheduler_logic logic{self};
      logic.catch_up();
      logic.on_probe();
    },
    [self](cancel_atom, seq_id id) {
      scheduler_logic logic{self};
      logic.catch_up();
      logic.on_cancel(id, "cancelled");
    },
    [self](stop_atom, seq_id id, std::uint32_t generated, std::uint32_t keep) {
      scheduler_logic logic{self};
      logic.catch_up();
      logic.on_stop(id, generated, keep);
    },
    [self](stats_atom) -> scheduler_stats_ptr {
      scheduler_logic logic{self};
      logic.catch_up();
      return std::make_shared<const scheduler_stats>(logic.snapshot_stats());
    },
    [self](policy_atom, actors::scheduler_policy p) -> bool {
      scheduler_logic{self}.catch_up();
      apply_policy(self->state, p);
      self->state.log->info("model '{}': policy updated: quantum {}, levels {}, spare slots {}, "
                            "max step tokens {}, aging steps {}",
                            self->state.setup.model, self->state.mlfq.knobs().quantum_steps,
                            self->state.mlfq.knobs().levels, self->state.spare,
                            self->state.max_step_tokens, self->state.mlfq.knobs().aging_steps);
      scheduler_logic{self}.reschedule();
      return true;
    },
    [self](reuse_atom, actors::reuse_policy p) -> bool {
      scheduler_logic logic{self};
      logic.catch_up();
      logic.apply_reuse(p);
      self->state.log->info("model '{}': reuse updated: mode {}, scope {}, idle ttl {} s, "
                            "min prefix {} tokens",
                            self->state.setup.model, to_string(p.mode), to_string(p.scope),
                            p.idle_ttl_s, p.min_prefix_tokens);
      logic.reschedule();
      return true;
    },
    [self](list_atom) -> sequence_list_ptr {
      scheduler_logic logic{self};
      logic.catch_up();
      return std::make_shared<const std::vector<sequence_info>>(logic.list());
    },
    [self](cache_list_atom) -> retained_list_ptr {
      scheduler_logic logic{self};
      logic.catch_up();
      return std::make_shared<const std::vector<retained_info>>(logic.retained_list());
    },
    [self](cache_drop_atom, retained_drop_request req) -> retained_drop_result {
      scheduler_logic logic{self};
      logic.catch_up();
      auto freed = logic.drop_retained(req);
      logic.reschedule(); // freed slots may admit waiting sequences
      return freed;
    },
    [self](shutdown_atom, std::string why) -> bool {
      scheduler_logic logic{self};
      logic.catch_up();
      logic.on_shutdown(why);
      return true;
    },
    [](crash_atom, const std::string& message) { throw std::runtime_error(message); },
  };
}

} // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, scheduler_setup setup) {
  return sys.spawn(scheduler_behavior, std::move(setup));
}

} // namespace kvlane::actors
