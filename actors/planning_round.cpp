#include "actors/planning_round.hpp"

#include "actors/plan_candidates.hpp"
#include "actors/preemption_figures.hpp"
#include "actors/slot_planner.hpp"

#include <algorithm>
#include <optional>
#include <vector>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;

/// Stands for "a retained entry" in the owners the slot planner sees.
constexpr seq_id retained_owner = 0;

// Carries out the planner's decisions as it makes them.
class planned_actions final : public slot_actions {
public:
  planned_actions(sequence_table& seqs, sequence_lifecycle& life) : seqs_(seqs), life_(life) {}
  kv_state admit(seq_id id, slot_id slot) override {
    auto& s = *seqs_.find(id);
    life_.admit(s, slot, clock::now());
    return s.state;
  }
  kv_state evict(seq_id id, eviction how) override {
    auto& s = *seqs_.find(id);
    life_.evict(s, how);
    return s.state;
  }

private:
  sequence_table& seqs_;
  sequence_lifecycle& life_;
};

} // namespace

bool goodput_gated(const scheduler_state& st) noexcept {
  return st.slo_gates && st.rules.order == rank_order::mlfq;
}

bool would_recompute(const scheduler_state& st, const sequence& s) {
  // A device without snapshots (caps.snapshots = false) can only recompute.
  return s.kv_len == 0 || !st.rules.swaps || !st.info.caps.snapshots
         || st.costs.prefer_recompute(s.kv_len, st.setup.backend->snapshot_size(s.kv_len),
                                      st.serialized);
}

void plan_round(scheduler_state& st, sequence_lifecycle& life, std::size_t limit,
                clock::time_point now) {
  (void)st.kv->expire_idle(now, false);
  const bool gated = goodput_gated(st);
  const preemption_figures figures{st.costs,
                                   st.outputs,
                                   gated ? &st.slo : nullptr,
                                   st.seqs.slot_holders().size(),
                                   st.info.max_prefill_chunk,
                                   st.serialized};
  const candidate_inputs inputs{
    [&st](std::uint32_t n) { return st.setup.backend->snapshot_size(n); },
    [&st](const sequence& s) { return would_recompute(st, s); }};
  if (gated)
    st.stats.demoted += demote_hopeless(st.seqs, figures, inputs, st.slo, now);
  const auto spare_slots = st.spare;
  const auto target = plan_target_size(st.info.slots, spare_slots, st.rules.preempts);
  auto order = st.seqs.best_ranked(limit != 0 ? std::min(limit, target) : target);
  life.take_warm_hits(limit, now);
  life.reclaim_warm(order, target, plan_spare(st.info.slots, spare_slots, st.rules.preempts));
  if (limit == 0)
    for (auto* s : st.seqs.residents_in_rank_order(order))
      order.push_back(s);
  const auto candidates = plan_candidates(order, figures, inputs, now);
  // A warm slot is held for the planner; reclaim_warm freed what it needs.
  std::vector<std::optional<seq_id>> owners(st.seqs.owners().begin(), st.seqs.owners().end());
  for (slot_id i = 0; i < owners.size(); ++i)
    if (st.kv->warm_in(i))
      owners[i] = retained_owner;
  slot_plan_input in;
  in.ranked = candidates;
  in.owners = owners;
  in.dumping = st.transfers.promised_slots();
  in.transfers_pending = st.transfers.pending();
  in.spare_slots = spare_slots;
  in.preemptive = st.rules.preempts;
  planned_actions actions{st.seqs, life};
  plan_slots(in, actions);
}

} // namespace kvlane::actors
