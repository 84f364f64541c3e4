#include "actors/scheduler.hpp"

#include "actors/exception_handler.hpp"
#include "actors/next_token.hpp"
#include "actors/plan_candidates.hpp"
#include "actors/planning_round.hpp"
#include "actors/scheduler_state.hpp"
#include "actors/sequence_lifecycle.hpp"
#include "actors/step_composer.hpp"
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

/// The scheduler's note to itself: plan the submits that arrived in a burst.
using replan_atom = caf::atom_constant<caf::atom("replan")>;

/// The scheduler's timer while the device is failing: the backoff is over.
using probe_atom = caf::atom_constant<caf::atom("probe")>;
/// The idle-expiry timer of retained KV; carries the ticket it was armed with.
using expire_atom = caf::atom_constant<caf::atom("expire")>;

using scheduler_actor = caf::stateful_actor<scheduler_state>;

// The actor's side of each event: the mailbox's handlers call it, it hands
// each event to the units (actors/sequence_lifecycle and the tables), plans,
// sends steps and transfers to the lanes, samples, and arms the timers.
class scheduler_logic final : public lifecycle_port {
public:
  explicit scheduler_logic(scheduler_actor* self)
    : self_(self), st_(self->state),
      life_({st_.seqs, *st_.kv, st_.transfers, st_.mlfq, st_.costs, st_.faults, st_.stats,
             st_.last_step_error, st_.shutting_down},
            *this, *st_.log, st_.setup.model) {}

  /// Handles an event other than a submit: first the plan the submits left
  /// stale (catch_up), so that no event is handled against a stale plan.
  template <class Handler, class... Args>
  static auto planned(scheduler_actor* self, Handler handler, Args&&... args) {
    scheduler_logic logic{self};
    logic.catch_up();
    return (logic.*handler)(std::forward<Args>(args)...);
  }

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
    auto& added =
      st_.seqs.add(std::move(seq), s.fairness_unit.empty() ? s.client : s.fairness_unit);
    ++st_.stats.submitted;
    if (goodput_gated())
      st_.seqs.watch_demotion(added, added.arrived);
    phase_changed(added, seq_phase::queued);
    schedule_after_burst();
  }

  void on_cancel(seq_id id, std::string_view why) {
    if (st_.seqs.find(id) == nullptr)
      return;
    life_.cancel(id, why, clock::now());
    schedule();
  }

  void on_stop(seq_id id, std::uint32_t generated, std::uint32_t keep) {
    if (life_.stop(id, generated, keep, clock::now()))
      schedule();
  }

  void on_step_done(step_done& done) {
    st_.step_in_flight = false;
    const double ms = ms_between(done.start, done.end);
    auto& plan = *done.plan;
    if (done.error) {
      life_.step_failed(plan, *done.error, clock::now());
      schedule();
      return;
    }

    if (st_.step_masks > 0 && st_.step_masks_done <= done.end)
      st_.stats.masks.hidden += st_.step_masks;
    std::uint32_t total_tokens = 0;
    for (auto& row : plan.rows)
      total_tokens += static_cast<std::uint32_t>(row.tokens.size());
    st_.costs.observe_step(total_tokens, ms);
    ++st_.stats.steps;
    st_.stats.step_busy_ms += ms;
    st_.overlap.add_step(done.start, done.end);

    // Before the rows are processed: a row that ends below must not end the
    // fault policy's isolation round as if it had not run.
    auto verdict = life_.step_succeeded(plan.seqs, clock::now());
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      auto* s = find(plan.seqs[i]);
      if (!s)
        continue;
      s->in_step = false;
      s->kv_len += static_cast<std::uint32_t>(plan.rows[i].tokens.size());
      if (s->cancelled) {
        life_.end_marked(*s, clock::now());
        continue;
      }
      life_.charge_step(*s);
      if (s->kv_len < s->tokens.size())
        continue; // a prefill chunk that is not the last one
      const auto next = next_token(*s, done.out.row(i));
      if (next.mask_us)
        st_.stats.masks.observe(*next.mask_us, false);
      if (next.k != next_token_outcome::kind::end)
        take_token(*s, next.token);
      if (next.k != next_token_outcome::kind::token) {
        life_.retain_or_release(*s, clock::now());
        life_.finish(*s, next.end, std::string{next.error}, clock::now());
      }
    }
    life_.apply_fault_actions(verdict, clock::now());
    if (st_.mlfq.ages())
      st_.seqs.age(st_.mlfq.knobs().aging_steps);
    schedule();
  }

  // Appends a sampled token to `s` and sends it to its session.
  void take_token(sequence& s, token_id tok) {
    s.tokens.push_back(tok);
    st_.seqs.note_head(s);
    if (s.generated++ == 0)
      s.first_token = clock::now();
    ++st_.stats.tokens_generated;
    if (s.smp.params().logprobs)
      self_->send(s.session, tokens_atom::value, std::vector<token_id>{tok},
                  std::vector<token_logprobs>{s.smp.last_logprobs()});
    else
      self_->send(s.session, tokens_atom::value, std::vector<token_id>{tok});
  }

  void on_probe() {
    st_.probe_timer_armed = false;
    schedule();
  }

  void on_transfer_done(transfer_done& done) {
    if (life_.transfer_ended(done, hidden_ms(done.start, done.end), clock::now()))
      schedule();
    if (st_.flushed && st_.kv->warm_count() == 0) {
      st_.flushed->deliver(true);
      st_.flushed.reset();
    }
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
    const auto in =
      std::max(*due - clock::now(), clock::duration::zero()) + std::chrono::milliseconds(1);
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
    life_.shutdown(why);
  }

  // -- figures and the admin (actors/scheduler_report, kvlane cache drop) ------

  scheduler_stats_ptr stats() const {
    auto out = report_stats(st_.stats, st_.info, st_.seqs, st_.costs, st_.faults, *st_.kv,
                            clock::now());
    out.refused = st_.setup.door ? st_.setup.door->refusals() : 0;
    return std::make_shared<const scheduler_stats>(std::move(out));
  }
  sequence_list_ptr list() const {
    return std::make_shared<const std::vector<sequence_info>>(
      list_sequences(st_.seqs, st_.setup.model, clock::now()));
  }
  retained_list_ptr list_cache() const {
    return std::make_shared<const std::vector<retained_info>>(
      list_retained(*st_.kv, st_.setup.model, clock::now()));
  }
  retained_drop_result drop_cache(const retained_drop_request& req) {
    auto freed = life_.drop_retained(req);
    schedule(); // freed slots may admit waiting sequences
    return freed;
  }

  // -- lifecycle_port: what the lifecycle needs done -------------------------------

  void send_transfer(transfer_job_ptr job) override {
    auto& lane = st_.transfers.lane() == transfer_lane::compute ? st_.compute : st_.transfer;
    st_.transfers.started(*job);
    self_->request(lane, caf::infinite, transfer_atom::value, std::move(job))
      .then([self = self_](transfer_done_ptr done) {
              planned(self, &scheduler_logic::on_transfer_done, *done);
            },
            [self = self_](caf::error& err) {
              self->state.log->critical("model '{}': transfer lane failed: {}",
                                        self->state.setup.model, caf::to_string(err));
              self->quit(err);
            });
  }

  void end_stream(sequence& s, stream_end end) override {
    if (!s.session)
      return;
    self_->send(s.session, end_atom::value, std::move(end));
    s.session = {};
  }

  void phase_changed(const sequence& s, seq_phase phase) override {
    if (st_.setup.observer)
      st_.setup.observer(st_.setup.model, s.id, phase);
  }

  void ended([[maybe_unused]] const sequence& s, end_reason reason) override {
    switch (reason) {
      case end_reason::cancelled: ++st_.stats.cancelled; break;
      case end_reason::error: ++st_.stats.failed; break;
      default:
        ++st_.stats.finished;
        st_.outputs.observe(s.generated);
        break;
    }
  }

  void retained_kept() override { arm_expiry(); }

private:
  // -- helpers -------------------------------------------------------------------

  sequence* find(seq_id id) const { return st_.seqs.find(id); }

  double hidden_ms(clock::time_point a, clock::time_point b) const {
    if (st_.serialized)
      return 0; // transfers run on the compute lane: nothing is hidden
    return st_.overlap.hidden_ms(a, b, st_.step_in_flight
                                         ? std::optional<clock::time_point>{st_.step_started}
                                         : std::nullopt);
  }

  // While a step fault is being handled nothing is admitted or preempted
  // (the rows under retry or isolation keep their slots); a failing device
  // with no resident sequence admits one, for the probe step.
  void schedule() {
    st_.plan_stale = false;
    if (!st_.shutting_down) {
      if (st_.faults.admits())
        plan_slots();
      else if (life_.probe_needs_a_sequence(st_.step_in_flight, clock::now()))
        plan_slots(1);
    }
    maybe_step();
    publish_door();
  }

  // What submit() refuses a request at the door on (actors/door_forecast); nothing to
  // publish while refusal is off (apply_policy cleared the board), but the rate is kept.
  void publish_door() {
    const auto now = clock::now();
    st_.grants.observe(now, st_.seqs.grants());
    if (st_.setup.door && door_refuses(st_.door_limits))
      st_.setup.door->publish(door_figures_of(st_.seqs, st_.grants, now,
                                              {st_.rules.order != rank_order::arrival,
                                               st_.rules.preempts, life_.free_slots(),
                                               st_.door_limits}));
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

  /// Plans slots for the `limit` best ranked sequences (0: all): actors/planning_round.
  void plan_slots(std::size_t limit = 0) { plan_round(st_, life_, limit, clock::now()); }

  bool goodput_gated() const noexcept { return actors::goodput_gated(st_); }

  void maybe_step() {
    if (st_.step_in_flight)
      return;
    const auto now = clock::now();
    const auto next = st_.faults.next(now);
    if (next.what == next_step::kind::wait) {
      arm_probe_timer(next.until - now);
      return;
    }
    auto candidates = life_.step_candidates(next);
    if (next.what != next_step::kind::compose && candidates.empty()) {
      // Every sequence that leaves its slot is forgotten by the policy, so
      // this cannot happen; if it does, end the episode rather than stall.
      st_.log->error("model '{}': the rows to {} are not resident; resuming normal steps",
                     st_.setup.model, next.what == next_step::kind::retry ? "retry" : "isolate");
      for (auto id : next.rows)
        life_.apply_fault_actions(st_.faults.forget(id, now), now);
      maybe_step();
      return;
    }
    step_limits limits{st_.max_step_tokens, st_.info.max_prefill_chunk,
                       st_.batch_prefill_yields, std::nullopt};
    if (goodput_gated())
      pace_by_tpot(candidates, limits, st_.seqs, st_.costs, st_.outputs, st_.slo,
                   st_.info.max_prefill_chunk, st_.serialized, clock::now());
    auto rows = compose_step(candidates, limits);
    if (rows.empty())
      return;
    auto plan = life_.start_step(rows, ++st_.step_number);
    const std::shared_ptr<const step_plan> plan_view = plan; // the lane gets `plan` itself
    st_.step_in_flight = true;
    st_.step_started = clock::now();
    self_->request(st_.compute, caf::infinite, step_atom::value, std::move(plan))
      .then([self = self_](step_done_ptr done) {
              planned(self, &scheduler_logic::on_step_done, *done);
            },
            [self = self_](caf::error& err) {
              self->state.log->critical("model '{}': compute lane failed: {}",
                                        self->state.setup.model, caf::to_string(err));
              self->quit(err);
            });
    prepare_masks(*plan_view);
  }

  // While the device runs a step, the masks of the rows that sample after it are computed
  // from their grammar state after the last sampled token (actors/constrained_decoding): the
  // host's share of constrained decoding overlaps the step instead of following it.
  void prepare_masks(const step_plan& plan) {
    st_.step_masks = 0;
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      auto* s = find(plan.seqs[i]);
      if (!s || !s->constrained || s->constrained->mask_ready()
          || s->kv_len + plan.rows[i].tokens.size() < s->tokens.size())
        continue; // free text, or a prefill chunk that is not the last
      const auto t0 = clock::now();
      s->constrained->prepare_mask();
      st_.step_masks_done = clock::now();
      st_.stats.masks.observe(us_between(t0, st_.step_masks_done), true);
      ++st_.step_masks;
    }
  }

  static double us_between(clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  }

  // -- the backoff's probe (actors/fault_policy, docs/scheduling.md "Failures") --

  void arm_probe_timer(clock::duration in) {
    if (st_.probe_timer_armed)
      return;
    st_.probe_timer_armed = true;
    self_->delayed_send(self_, std::chrono::ceil<std::chrono::microseconds>(in),
                        probe_atom::value);
  }

  scheduler_actor* self_;
  scheduler_state& st_;
  sequence_lifecycle life_;
};

// Knobs that may change while sequences run (kvlane reload).
void apply_policy(scheduler_state& st, const actors::scheduler_policy& p) {
  st.mlfq.set_knobs({p.quantum_steps, p.levels, p.aging_steps});
  st.max_step_tokens = p.max_step_tokens;
  st.batch_prefill_yields = p.batch_prefill_yields;
  // Where transfers stall compute, restoring a spare costs every slot holder
  // the same dump a new interactive request's eviction would, and the spare
  // saves that request only the dump's time: no slot is held spare there.
  // Nor in the peers that keep none (fcfs, prio-fcfs, recompute).
  st.spare = st.serialized || !st.rules.keeps_spare ? 0 : p.spare_slots;
  st.slo = p.slo;
  st.slo_gates = p.slo_gates_preemption;
  st.door_limits = door_limits(p.slo, p.refuse_over);
  if (st.setup.door && !door_refuses(st.door_limits))
    st.setup.door->publish({}); // no limits: submit() refuses nothing
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
  st.kv->adopt_restored(clock::now()); // retained KV an earlier daemon left in the store
  const auto placement = place_transfers(st.mode, st.info.caps.transfer_overlaps_compute);
  st.fallback = placement.fallback;
  st.serialized = placement.on_compute_lane;
  st.transfers = transfer_tracker{st.serialized};
  st.mlfq = mlfq_policy{{st.rules.order, placement.long_quanta, st.info.max_prefill_chunk}, {}};
  apply_policy(st, setup.policy);
  if (st.fallback)
    st.log->info("model '{}': backend cannot overlap transfers with compute; "
                 "using serialized switches with 4x longer quanta below level 0 and no spare slot",
                 setup.model);
  st.compute = spawn_lane(self->system(), setup.model + "/compute", setup.backend, setup.store,
                          setup.compute_heartbeat,
                          std::shared_ptr<device_gate>{setup.device, &setup.device->compute});
  st.transfer = spawn_lane(self->system(), setup.model + "/transfer", setup.backend, setup.store,
                           setup.transfer_heartbeat,
                           std::shared_ptr<device_gate>{setup.device, &setup.device->transfer});
  self->link_to(st.compute);
  self->link_to(st.transfer);
  st.setup = std::move(setup);
  self->set_exception_handler(log_and_stop("scheduler", spdlog::level::critical,
                                           "scheduler '" + self->state.setup.model + "'"));
  // Every handler but a submit plans first if submits left the plan stale
  // (catch_up), so none is handled against a stale plan.
  using logic = scheduler_logic;
  return {
    [self](submit_atom, submission_ptr s) { logic{self}.on_submit(*s); },
    [self](replan_atom) { logic{self}.on_replan(); },
    [self](expire_atom, std::uint64_t t) { logic::planned(self, &logic::on_expiry_timer, t); },
    [self](probe_atom) { logic::planned(self, &logic::on_probe); },
    [self](cancel_atom, seq_id id) {
      logic::planned(self, &logic::on_cancel, id, std::string_view{"cancelled"});
    },
    [self](stop_atom, seq_id id, std::uint32_t generated, std::uint32_t keep) {
      logic::planned(self, &logic::on_stop, id, generated, keep);
    },
    [self](stats_atom) { return logic::planned(self, &logic::stats); },
    [self](policy_atom, actors::scheduler_policy p) -> bool {
      logic{self}.catch_up();
      apply_policy(self->state, p);
      self->state.log->info("model '{}': policy updated: quantum {}, levels {}, spare slots {}, "
                            "max step tokens {}, aging steps {}",
                            self->state.setup.model, self->state.mlfq.knobs().quantum_steps,
                            self->state.mlfq.knobs().levels, self->state.spare,
                            self->state.max_step_tokens, self->state.mlfq.knobs().aging_steps);
      logic{self}.reschedule();
      return true;
    },
    [self](reuse_atom, actors::reuse_policy p) -> bool {
      logic::planned(self, &logic::apply_reuse, p);
      self->state.log->info("model '{}': reuse updated: mode {}, scope {}, idle ttl {} s, "
                            "min prefix {} tokens",
                            self->state.setup.model, to_string(p.mode), to_string(p.scope),
                            p.idle_ttl_s, p.min_prefix_tokens);
      logic{self}.reschedule();
      return true;
    },
    [self](list_atom) { return logic::planned(self, &logic::list); },
    [self](cache_list_atom) { return logic::planned(self, &logic::list_cache); },
    [self](cache_drop_atom, retained_drop_request req) {
      return logic::planned(self, &logic::drop_cache, req);
    },
    [self](flush_warm_atom) -> caf::result<bool> {
      auto& st = self->state;
      st.kv->flush_warm();
      logic::planned(self, &logic::reschedule);
      if (st.kv->warm_count() == 0)
        return true;
      st.flushed = self->make_response_promise();
      return *st.flushed;
    },
    [self](shutdown_atom, std::string why) -> bool {
      logic::planned(self, &logic::on_shutdown, why);
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
