#include "actors/preemption_figures.hpp"

#include <algorithm>

namespace kvlane::actors {

preemption_figures::preemption_figures(const cost_model& costs, const output_lengths& outputs,
                                       std::size_t slot_holders, std::uint32_t prefill_chunk,
                                       bool dump_exposed)
  : costs_(costs), outputs_(outputs), chunk_(std::max<std::uint32_t>(1, prefill_chunk)),
    dump_exposed_(dump_exposed) {
  const auto base = costs.step_base_ms();
  const auto per_token = costs.step_per_token_ms();
  if (base && per_token)
    step_ms_ = *base + *per_token * static_cast<double>(std::max<std::size_t>(1, slot_holders));
}

void preemption_figures::fill(const resident_progress& s, slot_candidate& c) const {
  const auto evict = c.recompute_cheaper ? costs_.recompute_ms(s.kv_len)
                                         : costs_.swap_ms(s.snapshot_bytes, dump_exposed_);
  c.eviction_ms = evict.value_or(0.0);
  if (!step_ms_)
    return;
  const auto prompt_left = s.kv_len < s.tokens ? s.tokens - s.kv_len : 0;
  const double prefill_steps = static_cast<double>((prompt_left + chunk_ - 1) / chunk_);
  const double left_at_most = s.max_tokens > s.generated ? s.max_tokens - s.generated : 0;
  c.expected_end_ms =
    (prefill_steps + outputs_.expected_remaining(s.generated, s.max_tokens)) * *step_ms_;
  c.end_at_most_ms = (prefill_steps + left_at_most) * *step_ms_;
}

} // namespace kvlane::actors
