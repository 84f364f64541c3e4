#include "actors/plan_candidates.hpp"

#include "actors/sequence_table.hpp"

#include "common/elapsed.hpp"

#include <algorithm>

namespace kvlane::actors {

namespace {

resident_progress progress_of(const sequence& s, const candidate_inputs* in,
                              std::chrono::steady_clock::time_point now) {
  using ms = std::chrono::duration<double, std::milli>;
  const auto since = s.generated > 0 ? s.first_token : s.arrived;
  return {s.kv_len,
          s.tokens.size(),
          s.generated,
          s.smp.params().max_tokens,
          in ? in->snapshot_size(s.kv_len) : 0,
          s.position.cls,
          ms(now - since).count(),
          s.generated > 0 ? ms(s.first_token - s.arrived).count() : 0.0};
}

} // namespace

slot_candidate plan_candidate(const sequence& s, const preemption_figures& figures,
                              const candidate_inputs& in,
                              std::chrono::steady_clock::time_point now) {
  slot_candidate c{s.id, s.state, s.slot, s.in_step, false};
  c.cls = s.position.cls;
  c.preempted_before = s.preemptions > 0;
  const bool waiting = s.state == kv_state::queued || s.state == kv_state::parked;
  if (s.state == kv_state::resident || waiting) {
    const auto progress = progress_of(s, &in, now);
    if (waiting) {
      figures.fill_waiting(progress, s.state == kv_state::parked, c);
    } else {
      if (!s.in_step)
        c.recompute_cheaper = in.recompute_cheaper(s);
      figures.fill(progress, c);
    }
  }
  return c;
}

std::vector<slot_candidate> plan_candidates(std::span<sequence* const> order,
                                            const preemption_figures& figures,
                                            const candidate_inputs& in,
                                            std::chrono::steady_clock::time_point now) {
  std::vector<slot_candidate> out;
  out.reserve(order.size());
  for (const auto* s : order)
    out.push_back(plan_candidate(*s, figures, in, now));
  return out;
}

void pace_by_tpot(std::span<step_candidate> rows, step_limits& limits,
                  const sequence_table& table, const cost_model& costs,
                  const output_lengths& outputs, const slo_targets& slo,
                  std::uint32_t prefill_chunk, bool serialized,
                  std::chrono::steady_clock::time_point now) {
  const auto base = costs.step_base_ms();
  const auto per_token = costs.step_per_token_ms();
  if (!base || !per_token)
    return;
  limits.cost = step_cost{*base, *per_token};
  const auto owners = table.owners();
  const auto holders = static_cast<std::size_t>(
    std::count_if(owners.begin(), owners.end(), [](const auto& o) { return o.has_value(); }));
  const preemption_figures figures{costs, outputs, &slo, holders, prefill_chunk, serialized};
  for (auto& row : rows) {
    const auto* s = table.find(row.id);
    if (s == nullptr || s->generated == 0 || !row.decodes())
      continue;
    if (auto allowance = figures.step_allowance_ms(progress_of(*s, nullptr, now)))
      row.step_allowance_ms = *allowance;
  }
}

std::uint64_t demote_hopeless(sequence_table& table, const preemption_figures& figures,
                              const candidate_inputs& in, const slo_targets& slo,
                              std::chrono::steady_clock::time_point now) {
  std::uint64_t demoted = 0;
  for (auto* s : table.due_for_demotion(now)) {
    const auto c = plan_candidate(*s, figures, in, now);
    const auto v =
      judge_demotion(c.slack_ms, ms_between(s->arrived, now), slo.of(s->position.cls).ttft_ms);
    if (v.demote) {
      table.demote(*s);
      ++demoted;
    } else {
      table.watch_demotion(*s, now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double, std::milli>(v.recheck_in_ms)));
    }
  }
  return demoted;
}

} // namespace kvlane::actors
