#include "actors/plan_candidates.hpp"

#include "actors/sequence_table.hpp"

namespace kvlane::actors {

std::vector<slot_candidate> plan_candidates(std::span<sequence* const> order,
                                            const preemption_figures& figures,
                                            const candidate_inputs& in,
                                            std::chrono::steady_clock::time_point now) {
  std::vector<slot_candidate> out;
  out.reserve(order.size());
  for (const auto* s : order) {
    slot_candidate c{s->id, s->state, s->slot, s->in_step, false};
    c.cls = s->position.cls;
    const bool waiting = s->state == kv_state::queued || s->state == kv_state::parked;
    if (s->state == kv_state::resident || waiting) {
      const auto since = s->generated > 0 ? s->first_token : s->arrived;
      const resident_progress progress{
        s->kv_len, s->tokens.size(), s->generated, s->smp.params().max_tokens,
        in.snapshot_size(s->kv_len), s->position.cls,
        std::chrono::duration<double, std::milli>(now - since).count()};
      if (waiting) {
        figures.fill_waiting(progress, s->state == kv_state::parked, c);
      } else {
        if (!s->in_step)
          c.recompute_cheaper = in.recompute_cheaper(*s);
        figures.fill(progress, c);
      }
    }
    out.push_back(c);
  }
  return out;
}

} // namespace kvlane::actors
