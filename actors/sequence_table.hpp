#pragma once

// kvlane::actors::sequence_table — one model's live sequences: by id, by the
// slot each holds, in rank order, by the head of their prompt, and counted by
// where their KV is.
//
// Problem it solves: every scheduling event asks questions of the live
// sequences — the best k in rank order, the residents outside them, who holds
// each slot, which queued sequences may take a warm slot, how many wait by
// class — and must answer them without a pass over every sequence
// (docs/scheduling.md, "Cost per event"). This table keeps the indexes that
// answer them (rank_index, aging_queue, a head index, per-state counts) in
// step with each change the scheduler makes. The scheduler decides; the table
// only records and answers.
//
// A cancelled sequence stays in the table until the lane working on it
// replies, but is no longer ranked, aged or found by its head.
//
// Pure: no clock, no actor. Threading: one scheduler.

#include "actors/aging_queue.hpp"
#include "actors/demotion_queue.hpp"
#include "actors/door_forecast.hpp"
#include "actors/constrained_decoding.hpp"
#include "actors/messages.hpp"
#include "actors/mlfq_policy.hpp"
#include "actors/rank_index.hpp"
#include "actors/sampler.hpp"
#include "actors/slot_planner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlane::actors {

/// One live sequence as the scheduler keeps it between steps: what the step
/// loop needs (tokens, sampler, where its KV is) without a message round trip.
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
  /// Its grammar state when the request has an output constraint (actors/constrained_decoding):
  /// part of the sequence, so it stays through a park, a load and a recompute.
  std::unique_ptr<constrained_output> constrained;
  kv_state state = kv_state::queued;
  std::uint32_t kv_len = 0; ///< positions valid in the slot or snapshot
  std::optional<slot_id> slot;
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
  std::optional<std::uint64_t> head; ///< reuse_head_of(tokens): which retained entries it can match
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token; ///< set with the first generated token

  explicit sequence(const submission& s)
    : id(s.id), client(s.client), owner(s.owner), session_name(s.session_name),
      session(s.session), tokens(s.prompt), prompt_len(static_cast<std::uint32_t>(s.prompt.size())),
      smp(s.sampling),
      constrained(s.constraint ? std::make_unique<constrained_output>(*s.constraint) : nullptr) {}
};

class sequence_table {
public:
  explicit sequence_table(rank_order order = rank_order::mlfq, std::uint32_t slots = 0);

  // -- membership ------------------------------------------------------------------

  /// Adds a new sequence at `s->position`, ranked among the sequences of
  /// `fairness_unit` (the per-client round robin's unit).
  sequence& add(std::unique_ptr<sequence> s, std::string_view fairness_unit);
  /// Removes a sequence (it ended); its slot must have been released.
  void erase(seq_id id);
  sequence* find(seq_id id) const;
  /// Every live sequence, cancelled ones too, in no particular order.
  std::vector<seq_id> ids() const;
  template <class Visit>
  void for_each(Visit&& visit) const {
    for (const auto& [id, s] : seqs_)
      visit(static_cast<const sequence&>(*s));
  }

  // -- where the KV is -------------------------------------------------------------

  void set_state(sequence& s, kv_state state);
  /// Live sequences in `state`, by priority class.
  const std::array<std::uint32_t, 2>& count(kv_state state) const {
    return counts_[static_cast<std::size_t>(state)];
  }
  /// Waiting (queued or parked) ranked sequences at the top level that are not
  /// demoted, by class: in its class, those a new request joining at the top ranks after.
  const std::array<std::uint32_t, 2>& top_waiting() const noexcept { return top_waiting_; }
  /// Slots given to sequences so far (take_slot calls): the door's grant rate.
  std::uint64_t grants() const noexcept { return grants_; }
  /// `s` was admitted to a slot at `now`: if it has no token yet, its wait since
  /// it arrived joins its class's recent first-slot waits (the door's evidence).
  void note_first_slot(const sequence& s, std::chrono::steady_clock::time_point now);
  const wait_window& first_waits(priority_class c) const noexcept {
    return first_waits_[static_cast<std::size_t>(c)];
  }
  void take_slot(sequence& s, slot_id slot);
  void release_slot(sequence& s);
  /// Per slot: the sequence that holds it (resident, dumping or loading).
  std::span<const std::optional<seq_id>> owners() const noexcept { return owners_; }
  /// The sequences that hold a slot, by slot: a pass over the slots.
  std::vector<sequence*> slot_holders() const;

  // -- rank order ------------------------------------------------------------------

  /// `s.position` changed from `before` (a step charged it): re-ranked only
  /// if its level or turn moved.
  void moved(sequence& s, const mlfq_position& before);
  /// No longer ranked, aged or found by its head (cancelled); still live.
  void unrank(const sequence& s);
  /// Files `s` under its first reuse block once it has one (a short prompt
  /// gets there by generating).
  void note_head(sequence& s);
  /// One successful step: the waiting sequences that reach `aging_steps`
  /// return to level 0 (mlfq_policy::age, carried out by the aging queue).
  void age(std::uint32_t aging_steps);

  // -- goodput: demotion before the first token ----------------------------------

  /// Checks `s` for demotion at `at` (actors/demotion_queue): a ranked
  /// sequence whose first token is still to come.
  void watch_demotion(const sequence& s, demotion_queue::time_point at);
  /// The ranked sequences due for a check at `now` that still have no first
  /// token and are not demoted; none of them is watched any more.
  std::vector<sequence*> due_for_demotion(demotion_queue::time_point now);
  /// Ranks `s` after every sequence of its class that can still meet its
  /// objective (until aging returns it to the top).
  void demote(sequence& s);

  /// The best `n` ranked sequences, best first.
  std::vector<sequence*> best_ranked(std::size_t n) const;
  /// Ranked residents that are not in `top`, best first.
  std::vector<sequence*> residents_in_rank_order(const std::vector<sequence*>& top) const;

  /// Calls `try_one(id)` on the queued sequences whose head is in `heads`
  /// (sorted), in rank order, until it returns false. When more than a few
  /// share a head (a common system prompt), it walks the rank order instead,
  /// every ranked sequence, so `try_one` must check the head itself. `limit`:
  /// only the best `limit` sequences (0: all).
  template <class Try>
  void for_each_with_head(std::span<const std::uint64_t> heads, std::size_t limit,
                          Try&& try_one) const;

private:
  static constexpr std::size_t few_with_head = 64;

  std::unordered_map<seq_id, std::unique_ptr<sequence>> seqs_;
  std::vector<std::optional<seq_id>> owners_;
  rank_index ranks_;  ///< the live sequences that are not cancelled, in rank order
  aging_queue aging_; ///< when waiting sequences return to level 0
  demotion_queue demotions_; ///< when sequences before their first token are checked
  /// The ranked sequences by (head, id): those that can match a warm entry.
  std::set<std::pair<std::uint64_t, seq_id>> by_head_;
  /// Live sequences (cancelled ones too) by [kv_state][priority_class]: the
  /// statistics, polled every 100 ms, without a pass over the sequences.
  std::array<std::array<std::uint32_t, 2>, 5> counts_{};
  std::array<std::uint32_t, 2> top_waiting_{};
  std::uint64_t grants_ = 0;
  std::array<wait_window, 2> first_waits_{};

  /// Adds (+1) or removes (-1) `s`, at position `p`, from top_waiting_ if it counts there.
  void count_top(const sequence& s, const mlfq_position& p, int sign);
};

template <class Try>
void sequence_table::for_each_with_head(std::span<const std::uint64_t> heads, std::size_t limit,
                                        Try&& try_one) const {
  std::vector<seq_id> candidates;
  bool many = limit != 0;
  for (auto h : heads) {
    for (auto it = by_head_.lower_bound({h, 0});
         !many && it != by_head_.end() && it->first == h; ++it) {
      if (find(it->second)->state != kv_state::queued)
        continue;
      candidates.push_back(it->second);
      many = candidates.size() > few_with_head;
    }
  }
  if (!many) {
    ranks_.sort(candidates); // distinct: one head per sequence
    for (auto id : candidates)
      if (!try_one(id))
        return;
    return;
  }
  std::size_t seen = 0;
  ranks_.walk([&](seq_id id) { return (limit == 0 || seen++ < limit) && try_one(id); });
}

} // namespace kvlane::actors
