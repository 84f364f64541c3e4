#include "actors/scheduler.hpp"

#include "actors/aging_queue.hpp"
#include "actors/cost_model.hpp"
#include "actors/exception_handler.hpp"
#include "actors/fault_policy.hpp"
#include "actors/lane.hpp"
#include "actors/mlfq_policy.hpp"
#include "actors/overlap_meter.hpp"
#include "actors/rank_index.hpp"
#include "actors/retention.hpp"
#include "actors/slot_planner.hpp"
#include "actors/step_composer.hpp"
#include "common/elapsed.hpp"
#include "common/logging.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <array>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;
using actors::scheduler_mode;

/// Token block of the prefix index: matches are exact to the token (the index
/// extends them past the last full block), so the block only sets the
/// shortest findable prefix and the index's size (one key per 16 tokens).
constexpr std::uint32_t reuse_block_tokens = 16;

/// The hash of the first reuse block of `tokens`, if they have one. Every
/// reuse match covers at least that block, so a prompt can only match an
/// entry with the same head.
std::optional<std::uint64_t> head_of(std::span<const token_id> tokens) {
  if (tokens.size() < reuse_block_tokens)
    return std::nullopt;
  return std::hash<std::string_view>{}(
    {reinterpret_cast<const char*>(tokens.data()), reuse_block_tokens * sizeof(token_id)});
}

/// Stands for "a retained entry" in the owners the slot planner sees.
constexpr seq_id retained_owner = 0;

/// The scheduler's note to itself: plan the submits that arrived in a burst.
using replan_atom = caf::atom_constant<caf::atom("replan")>;

/// The scheduler's timer while the device is failing: the backoff is over.
using probe_atom = caf::atom_constant<caf::atom("probe")>;
/// The idle-expiry timer of retained KV; carries the ticket it was armed with.
using expire_atom = caf::atom_constant<caf::atom("expire")>;


seq_phase phase_of(kv_state s) {
  switch (s) {
    case kv_state::queued: return seq_phase::queued;
    case kv_state::resident: return seq_phase::resident;
    case kv_state::dumping: return seq_phase::dumping;
    case kv_state::parked: return seq_phase::parked;
    case kv_state::loading: return seq_phase::loading;
  }
  return seq_phase::queued;
}

struct sequence {
  seq_id id = 0;
  std::string client;
  std::uint64_t owner = 0;
  std::string session_name; ///< the client session it is a turn of, empty if none
  caf::actor session;
  std::vector<token_id> tokens; ///< prompt, then generated tokens
  std::uint32_t prompt_len = 0;
  std::uint32_t generated = 0;
  sampler smp;
  kv_state state = kv_state::queued;
  std::uint32_t kv_len = 0; ///< positions valid in the slot or snapshot
  std::optional<slot_id> slot;
  ipc::snapshot_handle snapshot;
  std::uint64_t generation = 0; ///< bumped at every dump
  bool in_step = false;
  bool cancelled = false; ///< cancel (or stop) arrived while a lane works on it
  /// A stop (engine::stop) that arrived while a lane works on it: generated
  /// tokens to report and to keep. It then ends as a stop, not a cancel.
  std::optional<std::pair<std::uint32_t, std::uint32_t>> stop_at;
  mlfq_position position;
  std::uint32_t preemptions = 0;
  std::uint32_t reuse_len = 0; ///< loading a retained snapshot: roll back to this length
  std::uint32_t reused = 0;    ///< positions its last admission took from retained KV
  std::optional<std::uint64_t> head; ///< head_of(prompt): which retained entries it can match
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();

  explicit sequence(const submission& s)
    : id(s.id), client(s.client), owner(s.owner), session_name(s.session_name), tokens(s.prompt),
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
  actors::mode_rules rules; ///< what the mode decides (actors/policy)
  bool serialized = false; ///< transfers share the compute lane (sync, or no overlap)
  bool fallback = false;   ///< overlap mode on a backend that cannot overlap
  mlfq_policy mlfq;
  rank_index ranks;   ///< the live sequences that are not cancelled, in rank order
  aging_queue aging;  ///< when waiting sequences return to level 0
  /// The ranked sequences by (head, id): those that can match a warm entry.
  std::set<std::pair<std::uint64_t, seq_id>> by_head;
  /// Live sequences (cancelled ones too) by [kv_state][priority_class]: the
  /// statistics, polled every 100 ms, without a pass over the sequences.
  std::array<std::array<std::uint32_t, 2>, 5> counts{};
  std::uint32_t max_step_tokens = 0;
  bool batch_prefill_yields = false;
  std::uint32_t spare = 1;

  std::unordered_map<seq_id, std::unique_ptr<sequence>> seqs;
  std::vector<std::optional<seq_id>> slot_owner;
  std::uint64_t step_number = 0;
  bool step_in_flight = false;
  clock::time_point step_started;
  std::uint32_t transfers_on_transfer_lane = 0;
  std::uint32_t transfers_on_compute_lane = 0;
  cost_model costs;
  scheduler_stats stats;
  bool shutting_down = false;
  bool replan_queued = false; ///< a replan_atom is in the mailbox
  bool plan_stale = false;    ///< submits arrived since the last plan

  overlap_meter overlap; ///< how much transfer time the steps hid

  fault_policy faults;            ///< what failed steps lead to (actors/fault_policy)
  bool probe_timer_armed = false; ///< a probe_atom is on its way
  std::string last_step_error;    ///< the backend's message for the last failed step

  reuse_policy reuse;
  retention retained{reuse_block_tokens, 1};
  std::vector<std::optional<retained_id>> warm; ///< per slot: the retained entry warm in it
  std::uint32_t retained_dumps_in_flight = 0;
  clock::time_point last_expiry_check;
  std::optional<clock::time_point> expiry_due; ///< when the armed expiry timer fires
  std::uint64_t expiry_ticket = 0;             ///< the armed timer's; older ones are stale
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
    seq->position = st_.mlfq.enter(s.priority, seq->prompt_len);
    st_.ranks.insert(seq->id, seq->position,
                     s.fairness_unit.empty() ? seq->client : s.fairness_unit);
    st_.aging.enter(seq->id, seq->position.level > 0);
    note_head(*seq);
    count(*seq, +1);
    ++st_.stats.submitted;
    notify(*seq, seq_phase::queued);
    st_.seqs.emplace(seq->id, std::move(seq));
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
        (void)st_.setup.store->free(s->snapshot);
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
      note_head(*s);
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
    age_waiting();
    schedule();
  }

  void on_probe() {
    st_.probe_timer_armed = false;
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
    if (done.job.kind == transfer_kind::dump && done.job.retained != 0) {
      on_retained_dump_done(done, bytes, ms);
      schedule();
      return;
    }
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
        set_state(*s, kv_state::parked);
        s->snapshot = done.job.snapshot;
      }
      if (s->cancelled)
        end_marked(*s);
    } else {
      ++st_.stats.loads;
      (void)store->unpin(done.job.snapshot);
      if (!done.job.keep_snapshot)
        (void)store->free(done.job.snapshot);
      else if (done.corrupt)
        forget_retained_snapshot(done.job.snapshot);
      if (!s) {
        schedule();
        return;
      }
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
        // A retained snapshot may cover more than the prompt shares with it:
        // roll back to the match and prefill the rest.
        s->kv_len = done.job.keep_snapshot ? s->reuse_len : done.job.cache_len;
        if (done.job.keep_snapshot) {
          ++st_.stats.reuse_hits;
          st_.stats.reused_tokens += s->reuse_len;
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
    st_.reuse = p;
    // A device without snapshots keeps retained KV in its slots only.
    if (!st_.info.caps.snapshots && p.mode == reuse_mode::store)
      st_.reuse.mode = reuse_mode::slot;
    st_.retained.set_min_prefix(p.min_prefix_tokens);
    if (p.mode == reuse_mode::off)
      drop_all_retained();
    // A shorter TTL may be due sooner than the armed timer.
    st_.expiry_due.reset();
    arm_expiry();
  }

  /// Arms the timer for the moment the least recently used retained entry
  /// outlives the idle TTL, so retained KV expires on time on a model that
  /// has nothing else to do (expiry at scheduling events alone would keep it
  /// forever there). At most one timer counts: the earliest armed.
  void arm_expiry() {
    const auto oldest = st_.retained.oldest_use();
    if (st_.reuse.idle_ttl_s == 0 || !oldest)
      return;
    const auto due = *oldest + std::chrono::seconds(st_.reuse.idle_ttl_s);
    if (st_.expiry_due && *st_.expiry_due <= due)
      return;
    st_.expiry_due = due;
    // idle_since() counts an entry idle once strictly past the TTL.
    const auto in = std::max(due - clock::now(), clock::duration::zero()) + std::chrono::milliseconds(1);
    self_->delayed_send(self_, std::chrono::ceil<std::chrono::milliseconds>(in), expire_atom::value,
                        ++st_.expiry_ticket);
  }

  void on_expiry_timer(std::uint64_t ticket) {
    if (ticket != st_.expiry_ticket)
      return; // an earlier deadline replaced this timer
    st_.expiry_due.reset();
    if (expire_idle(true))
      schedule(); // freed slots may admit waiting sequences
    arm_expiry();
  }

  void on_shutdown(const std::string& why) {
    st_.shutting_down = true;
    drop_all_retained();
    std::vector<seq_id> ids;
    for (auto& [id, s] : st_.seqs)
      ids.push_back(id);
    for (auto id : ids) {
      auto* s = find(id);
      if (!s)
        continue;
      // Lanes still working on a sequence hold its slot; the store pages of a
      // parked one go back now. Nothing is waited for: the streams end here.
      if (s->state == kv_state::parked)
        (void)st_.setup.store->free(s->snapshot);
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
        erase_sequence(id);
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
      i.priority = s->position.cls;
      i.phase = phase_of(s->state);
      i.tokens_in = s->prompt_len;
      i.tokens_out = s->generated;
      i.level = s->position.level;
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
    auto in_state = [&](kv_state k) { return counts_of(k)[0] + counts_of(k)[1]; };
    out.queued = in_state(kv_state::queued);
    out.resident = in_state(kv_state::resident);
    out.parked = in_state(kv_state::parked);
    out.loading = in_state(kv_state::loading);
    out.dumping = in_state(kv_state::dumping);
    const auto interactive = static_cast<std::size_t>(priority_class::interactive);
    const auto batch = static_cast<std::size_t>(priority_class::batch);
    out.without_slot_interactive =
      counts_of(kv_state::queued)[interactive] + counts_of(kv_state::parked)[interactive];
    out.without_slot_batch =
      counts_of(kv_state::queued)[batch] + counts_of(kv_state::parked)[batch];
    const auto full = st_.info.caps.extent == backends::snapshot_extent::full_slot
                        ? st_.info.snapshot_bytes
                        : st_.info.snapshot_header_bytes
                            + st_.info.bytes_per_token * st_.info.max_context;
    out.step_base_ms = st_.costs.step_base_ms().value_or(0);
    out.step_per_token_ms = st_.costs.step_per_token_ms().value_or(0);
    out.dump_ms = st_.costs.dump_ms(full).value_or(0);
    out.load_ms = st_.costs.load_ms(full).value_or(0);
    out.device = st_.faults.health();
    out.device_backoff_ms = static_cast<double>(st_.faults.backoff().count());
    out.faults = st_.faults.counters();
    out.retained = static_cast<std::uint32_t>(st_.retained.size());
    for (auto& w : st_.warm)
      out.retained_warm += w.has_value();
    const auto now = clock::now();
    for (const auto id : st_.retained.ids()) {
      const auto info = describe_retained(*st_.retained.find(id), now);
      if (info.stored) {
        ++out.retained_stored;
        out.retained_store_bytes += info.bytes;
      } else {
        out.retained_warm_bytes += info.bytes;
      }
    }
    return out;
  }

  // -- retained KV for the admin (kvlane cache ls / drop) ------------------------

  std::vector<retained_info> list_retained() const {
    std::vector<retained_info> out;
    const auto now = clock::now();
    for (const auto id : st_.retained.ids())
      out.push_back(describe_retained(*st_.retained.find(id), now));
    return out;
  }

  /// Removes the selected entries and frees what they hold. Slots free at
  /// once, except those being dumped (freed, with their snapshot, when the
  /// dump ends).
  retained_drop_result drop_retained(const retained_drop_request& req) {
    retained_drop_result out;
    for (const auto id : st_.retained.ids()) {
      if (!selected_by(req, *st_.retained.find(id)))
        continue;
      auto e = st_.retained.erase(id);
      ++out.entries;
      out.tokens += e->kv_len;
      out.slots += e->slot && !e->dumping;
      if (e->snapshot) {
        ++out.snapshots;
        out.store_bytes += store_bytes_of(e->kv_len);
      }
      discard(e->slot, e->snapshot, e->dumping);
      ++st_.stats.retained_admin_dropped;
    }
    if (out.entries > 0)
      st_.log->info("model '{}': dropped {} retained entries on request ({} slots, {} snapshots, "
                    "{} store bytes)",
                    st_.setup.model, out.entries, out.slots, out.snapshots, out.store_bytes);
    return out;
  }

private:
  // -- helpers -------------------------------------------------------------------

  sequence* find(seq_id id) const {
    auto it = st_.seqs.find(id);
    return it == st_.seqs.end() ? nullptr : it->second.get();
  }

  /// `mlfq_policy::age` for every live sequence after a successful step,
  /// carried out by the aging queue: O(slots) plus the sequences it lifts.
  void age_waiting() {
    if (!st_.mlfq.ages())
      return;
    std::vector<seq_id> residents;
    for (auto* s : slot_holders())
      if (s->state == kv_state::resident)
        residents.push_back(s->id);
    for (auto id : st_.aging.step(residents, st_.mlfq.knobs().aging_steps)) {
      auto* s = find(id);
      if (!s)
        continue;
      mlfq_policy::return_to_top(s->position);
      st_.ranks.update(id, s->position);
    }
  }

  /// The sequences that hold a slot (resident, dumping or loading), by slot.
  std::vector<sequence*> slot_holders() const {
    std::vector<sequence*> out;
    for (const auto& owner : st_.slot_owner)
      if (owner)
        if (auto* s = find(*owner))
          out.push_back(s);
    return out;
  }

  /// Charges a step the sequence ran in; it may drop a level and take a new turn.
  void charge_step(sequence& s) {
    const auto before = s.position;
    st_.mlfq.charge_step(s.position);
    if (s.position.level == before.level && s.position.turn == before.turn)
      return; // most steps: same place
    st_.ranks.update(s.id, s.position);
    st_.aging.set_above_top(s.id, s.position.level > 0);
  }

  /// A cancelled sequence stays until the lane working on it replies, but is
  /// no longer ranked or aged.
  void mark_cancelled(sequence& s) {
    s.cancelled = true;
    unrank(s);
  }

  /// Ends a sequence marked while a lane worked on it, now that none does
  /// (it is queued, resident or parked): as its stop, or as cancelled.
  void end_marked(sequence& s) {
    if (s.stop_at) {
      stop_now(s, s.stop_at->first, s.stop_at->second);
      return;
    }
    if (s.state == kv_state::parked)
      (void)st_.setup.store->free(s.snapshot);
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
      (void)st_.setup.store->free(s.snapshot);
    if (s.state == kv_state::resident)
      retain_or_release(s);
    else
      release_slot(s);
    finish(s, end_reason::stop, {});
  }

  void erase_sequence(seq_id id) {
    if (auto* s = find(id)) {
      unrank(*s);
      count(*s, -1);
    }
    st_.seqs.erase(id);
  }

  /// Files a sequence under its first reuse block once it has one (a short
  /// prompt gets there by generating).
  void note_head(sequence& s) {
    if (s.head || s.cancelled)
      return;
    s.head = head_of(s.tokens);
    if (s.head)
      st_.by_head.emplace(*s.head, s.id);
  }

  void unrank(const sequence& s) {
    st_.ranks.erase(s.id);
    st_.aging.leave(s.id);
    if (s.head)
      st_.by_head.erase({*s.head, s.id});
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

  const std::array<std::uint32_t, 2>& counts_of(kv_state k) const {
    return st_.counts[static_cast<std::size_t>(k)];
  }

  /// Adds (+1) or removes (-1) `s` from the counts under its current state.
  void count(const sequence& s, int delta) {
    const auto state = static_cast<std::size_t>(s.state);
    const auto cls = static_cast<std::size_t>(s.position.cls);
    auto& n = st_.counts[state][cls];
    n = delta > 0 ? n + 1 : n - 1;
  }

  void set_state(sequence& s, kv_state state) {
    count(s, -1);
    s.state = state;
    count(s, +1);
    notify(s, phase_of(state));
  }

  void release_slot(sequence& s) {
    if (s.slot) {
      st_.slot_owner[*s.slot].reset();
      s.slot.reset();
    }
  }

  void drop_kv(sequence& s) {
    set_state(s, kv_state::queued);
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
    erase_sequence(id); // `s` dies here
    forget_faults_of(id);
  }

  void take_slot(sequence& s, slot_id slot) {
    st_.slot_owner[slot] = s.id;
    s.slot = slot;
  }

  // -- conversations: retention and reuse (docs/scheduling.md) -------------------

  prefix_scope scope_of(std::uint64_t owner) const {
    return {st_.info.identity, st_.reuse.scope == reuse_scope::all ? shared_owner : owner};
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
    if (st_.reuse.mode == reuse_mode::off || !s.slot || st_.shutting_down) {
      release_slot(s);
      return;
    }
    const slot_id slot = *s.slot;
    std::vector<superseded> dropped;
    const auto id = st_.retained.retain(scope_of(s.owner), std::span(s.tokens).first(s.kv_len),
                                        slot, {s.owner, s.session_name}, clock::now(),
                                        dropped);
    for (const auto& d : dropped)
      discard(d.slot, d.snapshot, d.dumping);
    st_.stats.retained_superseded += dropped.size();
    release_slot(s);
    if (id) {
      st_.warm[slot] = *id;
      arm_expiry();
    }
  }

  /// Frees what a removed entry held. A slot being dumped stays held until
  /// the dump ends (on_retained_dump_done frees its snapshot then).
  void discard(std::optional<slot_id> slot, std::optional<ipc::snapshot_handle> snapshot,
               bool dumping) {
    if (snapshot)
      (void)st_.setup.store->free(*snapshot);
    if (slot && !dumping)
      st_.warm[*slot].reset();
  }

  /// Whether a drop request covers `e`: every selector that is set matches.
  static bool selected_by(const retained_drop_request& req, const retained_entry& e) {
    return (!req.id || *req.id == e.id)
           && (!req.session
               || (req.session->user == e.origin.user && req.session->name == e.origin.session));
  }

  /// Store bytes a snapshot of `kv_len` positions is charged (the store
  /// rounds every reservation up to its granularity).
  std::uint64_t store_bytes_of(std::uint32_t kv_len) const {
    const auto g = st_.setup.store->granularity();
    const auto bytes = st_.setup.backend->snapshot_size(kv_len);
    return (bytes + g - 1) / g * g;
  }

  retained_info describe_retained(const retained_entry& e, clock::time_point now) const {
    retained_info i;
    i.id = e.id;
    i.model = st_.setup.model;
    i.owner = e.scope.owner;
    i.session = e.origin.session;
    i.tokens = e.kv_len;
    i.slot = e.slot ? static_cast<std::int32_t>(*e.slot) : -1;
    i.stored = e.snapshot.has_value();
    i.dumping = e.dumping;
    i.bytes = i.stored ? store_bytes_of(e.kv_len) : st_.setup.backend->snapshot_size(e.kv_len);
    i.hits = e.hits;
    i.idle_ms = ms_between(e.last_use, now);
    return i;
  }

  void drop_all_retained() {
    for (const auto id : st_.retained.ids())
      if (auto e = st_.retained.erase(id))
        discard(e->slot, e->snapshot, e->dumping);
  }

  /// Drops retained entries idle past the TTL; at most once a second unless
  /// `now_due` (the expiry timer). True when something went.
  bool expire_idle(bool now_due = false) {
    if (st_.reuse.idle_ttl_s == 0)
      return false;
    const auto now = clock::now();
    if (!now_due && now - st_.last_expiry_check < std::chrono::seconds(1))
      return false;
    st_.last_expiry_check = now;
    bool any = false;
    for (const auto id : st_.retained.idle_since(now, std::chrono::seconds(st_.reuse.idle_ttl_s)))
      if (auto e = st_.retained.erase(id)) {
        discard(e->slot, e->snapshot, e->dumping);
        ++st_.stats.retained_expired;
        any = true;
      }
    return any;
  }

  std::optional<retained_match> find_reusable(const sequence& s) const {
    if (st_.reuse.mode == reuse_mode::off || s.tokens.size() < 2)
      return std::nullopt;
    // The last prompt token is always prefilled: its logits give the next token.
    return st_.retained.match(scope_of(s.owner), s.tokens,
                              static_cast<std::uint32_t>(s.tokens.size() - 1));
  }

  /// Moves `s` into the warm slot of `m`, rolled back to the match.
  void take_warm(sequence& s, const retained_match& m) {
    const slot_id slot = *m.slot;
    st_.retained.use(m.entry, clock::now());
    st_.warm[slot].reset();
    st_.retained.slot_released(m.entry);
    take_slot(s, slot);
    s.kv_len = m.length;
    s.reused = m.length;
    ++st_.stats.reuse_hits;
    ++st_.stats.reuse_warm_hits;
    st_.stats.reused_tokens += m.length;
    set_state(s, kv_state::resident);
  }

  // Queued sequences whose prefix sits warm in a slot take that slot now,
  // before any warm slot is reclaimed: the KV they need is already on the
  // device. One outside the target is then an ordinary resident the planner
  // may preempt (a swap keeps its KV as a parked sequence's, worth more than
  // a retained one's).
  //
  // Only a warm entry yields such a hit, and only to a sequence whose first
  // reuse block is the entry's: those few (by_head) are tried in rank order.
  // When many share a warm head (a common system prompt), walking the rank
  // order is cheaper: the first of them is near the front. Either way the
  // search ends when no slot is warm. `limit`: the best `limit` sequences
  // only (0: all).
  void take_warm_hits(std::size_t limit) {
    if (st_.reuse.mode == reuse_mode::off || !any_warm())
      return;
    std::vector<std::uint64_t> heads;
    for (const auto& w : st_.warm)
      if (w)
        if (auto h = head_of(st_.retained.tokens(*w)))
          heads.push_back(*h);
    std::sort(heads.begin(), heads.end());
    heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
    // The queued sequences with a warm head, unless there are more than `few`.
    constexpr std::size_t few = 64;
    std::vector<seq_id> candidates;
    bool many = limit != 0;
    for (auto h : heads) {
      for (auto it = st_.by_head.lower_bound({h, 0});
           !many && it != st_.by_head.end() && it->first == h; ++it) {
        if (find(it->second)->state != kv_state::queued)
          continue;
        candidates.push_back(it->second);
        many = candidates.size() > few;
      }
    }
    auto try_one = [&](seq_id id) {
      auto& s = *find(id);
      if (s.state != kv_state::queued || !s.head
          || !std::binary_search(heads.begin(), heads.end(), *s.head))
        return true;
      if (auto m = find_reusable(s); m && m->slot) {
        take_warm(s, *m);
        return any_warm();
      }
      return true;
    };
    if (!many) {
      st_.ranks.sort(candidates); // distinct: one head per sequence
      for (auto id : candidates)
        if (!try_one(id))
          return;
      return;
    }
    std::size_t seen = 0;
    st_.ranks.walk([&](seq_id id) { return (limit == 0 || seen++ < limit) && try_one(id); });
  }

  bool any_warm() const {
    return std::any_of(st_.warm.begin(), st_.warm.end(), [](auto& w) { return w.has_value(); });
  }

  // Warm slots go before any live sequence is evicted: for every target
  // sequence without a slot and for the spare. With a store and an idle lane
  // the coldest warm entry is dumped (its slot frees when the dump ends);
  // otherwise, when a sequence needs the slot now, it is dropped.
  void reclaim_warm(const std::vector<sequence*>& order) {
    std::uint32_t waiting = 0;
    for (std::size_t i = 0; i < order.size() && i < target_size(); ++i)
      waiting += order[i]->state == kv_state::queued || order[i]->state == kv_state::parked;
    std::uint32_t free = 0;
    for (slot_id i = 0; i < st_.slot_owner.size(); ++i)
      free += !st_.slot_owner[i] && !st_.warm[i];
    std::uint32_t promised = slots_being_freed() + st_.retained_dumps_in_flight;
    while (free + promised < waiting + spare_wanted()) {
      const auto coldest = st_.retained.coldest_warm();
      if (!coldest)
        return;
      if (st_.reuse.mode == reuse_mode::store && transfers_pending() == 0
          && dump_retained(*coldest)) {
        ++promised;
        continue;
      }
      drop_warm(*coldest);
      ++free;
    }
  }

  void drop_warm(retained_id id) {
    const auto* e = st_.retained.find(id);
    if (e == nullptr || !e->slot)
      return;
    st_.warm[*e->slot].reset();
    st_.retained.slot_released(id);
    ++st_.stats.retained_dropped;
  }

  bool dump_retained(retained_id id) {
    const auto* e = st_.retained.find(id);
    if (e == nullptr || !e->slot)
      return false;
    ipc::snapshot_meta meta;
    meta.model_identity = st_.info.identity;
    meta.model_index = st_.setup.model_index;
    meta.cache_len = e->kv_len;
    meta.generation = 1;
    meta.sequence_id = id;
    meta.retained = true;
    auto r = st_.setup.store->reserve(meta, st_.setup.backend->snapshot_size(e->kv_len));
    if (!r)
      return false; // the retained share is taken by more valuable entries
    forget_evicted(r->evicted);
    st_.retained.dump_started(id);
    ++st_.retained_dumps_in_flight;
    ++st_.stats.retained_dumps;
    auto job = std::make_shared<transfer_job>();
    job->kind = transfer_kind::dump;
    job->slot = *e->slot;
    job->cache_len = e->kv_len;
    job->generation = meta.generation;
    job->snapshot = r->handle;
    job->destination = r->bytes;
    job->retained = id;
    send_transfer(std::move(job));
    return true;
  }

  void on_retained_dump_done(const transfer_done& done, std::uint64_t bytes, double ms) {
    ++st_.stats.dumps;
    --st_.retained_dumps_in_flight;
    st_.warm[done.job.slot].reset();
    if (done.error) {
      ++st_.stats.dump_failures;
      st_.log->warn("model '{}': retained KV {} could not be stored: {}", st_.setup.model,
                    done.job.retained, *done.error);
      (void)st_.setup.store->free(done.job.snapshot);
      st_.retained.dump_finished(done.job.retained, std::nullopt);
      return;
    }
    st_.costs.observe_dump(bytes, ms);
    if (!st_.retained.dump_finished(done.job.retained, done.job.snapshot))
      (void)st_.setup.store->free(done.job.snapshot); // superseded or dropped meanwhile
  }

  void forget_retained_snapshot(ipc::snapshot_handle h) {
    if (const auto id = st_.retained.by_snapshot(h)) {
      if (auto e = st_.retained.erase(*id))
        discard(e->slot, e->snapshot, e->dumping);
      ++st_.stats.retained_lost;
    }
  }

  // What the store evicted for one of our reservations is gone at once: a
  // parked sequence of this model will recompute, a retained entry is lost.
  // (Another model's scheduler learns of its losses when its pin fails.)
  void forget_evicted(const std::vector<ipc::evicted_snapshot>& evicted) {
    for (const auto& e : evicted) {
      if (e.meta.model_index != st_.setup.model_index)
        continue;
      if (e.meta.retained) {
        if (const auto id = st_.retained.by_snapshot(e.handle)) {
          st_.retained.snapshot_lost(*id);
          ++st_.stats.retained_lost;
        }
        continue;
      }
      // A sequence's snapshot carries its id (evict), so no search is needed.
      if (auto* s = find(e.meta.sequence_id);
          s && s->state == kv_state::parked && s->snapshot == e.handle) {
        ++st_.stats.snapshots_lost;
        drop_kv(*s);
      }
    }
  }

  /// A queued sequence just given `s.slot` starts from retained KV if it can:
  /// a warm slot (this one is handed back), or a stored snapshot loaded when
  /// the cost model says a load beats prefilling the matched tokens.
  bool reuse_retained(sequence& s) {
    const auto m = find_reusable(s);
    if (!m)
      return false;
    if (m->slot) {
      release_slot(s); // the planner sees the warm slot as held: swapping is safe
      take_warm(s, *m);
      return true;
    }
    if (!m->snapshot || st_.reuse.mode != reuse_mode::store)
      return false;
    // The dump is paid already: only the load counts against the prefill.
    if (st_.costs.prefer_recompute(m->length, st_.setup.backend->snapshot_size(m->snapshot_len),
                                   false)) {
      ++st_.stats.reuse_recomputed;
      return false;
    }
    if (!st_.setup.store->pin(*m->snapshot)) {
      forget_retained_snapshot(*m->snapshot);
      return false;
    }
    st_.retained.use(m->entry, clock::now());
    s.reuse_len = m->length;
    set_state(s, kv_state::loading);
    auto job = std::make_shared<transfer_job>();
    job->kind = transfer_kind::load;
    job->seq = s.id;
    job->slot = *s.slot;
    job->cache_len = m->snapshot_len;
    job->generation = 1;
    job->snapshot = *m->snapshot;
    job->keep_snapshot = true;
    send_transfer(std::move(job));
    return true;
  }

  /// The best `n` live sequences that are not cancelled, best first.
  std::vector<sequence*> best_ranked(std::size_t n) const {
    std::vector<sequence*> out;
    for (auto id : st_.ranks.best(n))
      out.push_back(find(id));
    return out;
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
    expire_idle();
    const auto spare_slots = st_.rules.keeps_spare ? st_.spare : 0;
    const auto target = plan_target_size(st_.info.slots, spare_slots, st_.rules.preempts);
    auto order = best_ranked(limit != 0 ? std::min(limit, target) : target);
    take_warm_hits(limit);
    reclaim_warm(order);
    if (limit == 0)
      for (auto* s : residents_in_rank_order(order))
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
    std::vector<std::optional<seq_id>> owners = st_.slot_owner;
    for (slot_id i = 0; i < owners.size(); ++i)
      if (st_.warm[i])
        owners[i] = retained_owner;
    slot_plan_input in;
    in.ranked = candidates;
    in.owners = owners;
    in.dumping = slots_being_freed() + st_.retained_dumps_in_flight;
    in.transfers_pending = transfers_pending();
    in.spare_slots = spare_slots;
    in.preemptive = st_.rules.preempts;
    planned_actions actions{*this};
    actors::plan_slots(in, actions);
  }

  /// Resident sequences that are ranked but not in `top`, best first.
  std::vector<sequence*> residents_in_rank_order(const std::vector<sequence*>& top) const {
    std::vector<seq_id> ids;
    for (auto* s : slot_holders())
      if (s->state == kv_state::resident && !s->cancelled
          && std::find(top.begin(), top.end(), s) == top.end())
        ids.push_back(s->id);
    st_.ranks.sort(ids);
    std::vector<sequence*> out;
    for (auto id : ids)
      out.push_back(find(id));
    return out;
  }

  /// Dumps under way hold their slots: a pass over the slots.
  std::uint32_t slots_being_freed() const {
    std::uint32_t n = 0;
    for (auto* s : slot_holders())
      n += s->state == kv_state::dumping;
    return n;
  }

  std::uint32_t transfers_pending() const {
    return st_.serialized ? st_.transfers_on_compute_lane : st_.transfers_on_transfer_lane;
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
    forget_evicted(r->evicted);
    ++st_.stats.swaps;
    ++s.generation;
    set_state(s, kv_state::dumping);
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
    if (s.state == kv_state::queued) {
      s.kv_len = 0;
      s.reused = 0;
      if (reuse_retained(s))
        return;
      set_state(s, kv_state::resident); // prefill (or recompute) from position 0
      return;
    }
    // Parked: the snapshot may have been evicted for another model or sequence.
    if (auto pinned = st_.setup.store->pin(s.snapshot); !pinned) {
      ++st_.stats.snapshots_lost;
      drop_kv(s);
      set_state(s, kv_state::resident);
      return;
    }
    set_state(s, kv_state::loading);
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
  st.slot_owner.assign(st.info.slots, std::nullopt);
  st.warm.assign(st.info.slots, std::nullopt);
  st.reuse = setup.reuse;
  st.retained.set_min_prefix(setup.reuse.min_prefix_tokens);
  const auto placement = place_transfers(st.mode, st.info.caps.transfer_overlaps_compute);
  st.fallback = placement.fallback;
  st.serialized = placement.on_compute_lane;
  st.mlfq = mlfq_policy{{st.rules.order, placement.long_quanta, st.info.max_prefill_chunk}, {}};
  st.ranks = rank_index{st.rules.order};
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
      return std::make_shared<const std::vector<retained_info>>(logic.list_retained());
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
