#include "actors/preemption_figures.hpp"

#include <algorithm>

namespace kvlane::actors {

preemption_figures::preemption_figures(const cost_model& costs, const output_lengths& outputs,
                                       const slo_targets* slo, std::size_t slot_holders,
                                       std::uint32_t prefill_chunk, bool dump_exposed)
  : costs_(costs), outputs_(outputs), slo_(slo), chunk_(std::max<std::uint32_t>(1, prefill_chunk)),
    others_(slot_holders > 0 ? slot_holders - 1 : 0), dump_exposed_(dump_exposed) {
  const auto base = costs.step_base_ms();
  const auto per_token = costs.step_per_token_ms();
  if (base && per_token) {
    step_ms_ = *base + *per_token * static_cast<double>(std::max<std::size_t>(1, slot_holders));
    per_token_ms_ = *per_token;
  }
}

double preemption_figures::prefill_ms(std::size_t tokens) const {
  const double steps = static_cast<double>((tokens + chunk_ - 1) / chunk_);
  return steps * *step_ms_ + per_token_ms_ * static_cast<double>(tokens);
}

void preemption_figures::fill(const resident_progress& s, slot_candidate& c) const {
  const auto evict = c.recompute_cheaper ? costs_.recompute_ms(s.kv_len)
                                         : costs_.swap_ms(s.snapshot_bytes, dump_exposed_);
  c.eviction_ms = evict.value_or(0.0);
  // A re-prefill runs in the steps, and a transfer that stalls compute stops them.
  if (c.recompute_cheaper || dump_exposed_)
    c.others_delay_ms = c.eviction_ms * static_cast<double>(others_);
  if (!step_ms_)
    return;
  const auto prompt_left = s.kv_len < s.tokens ? s.tokens - s.kv_len : 0;
  const double prefill = prefill_ms(prompt_left);
  const double left_at_most = s.max_tokens > s.generated ? s.max_tokens - s.generated : 0;
  const double left = outputs_.expected_remaining(s.generated, s.max_tokens);
  c.expected_end_ms = prefill + left * *step_ms_;
  c.end_at_most_ms = prefill + left_at_most * *step_ms_;
  c.slack_ms = slack(s, prefill, left);
}

void preemption_figures::fill_waiting(const resident_progress& s, bool parked,
                                      slot_candidate& c) const {
  if (!step_ms_)
    return;
  const auto start = parked ? costs_.load_ms(s.snapshot_bytes)
                            : std::optional<double>(prefill_ms(s.tokens > s.kv_len ? s.tokens - s.kv_len : 0));
  if (!start)
    return;
  const double left = outputs_.expected_remaining(s.generated, s.max_tokens);
  c.service_ms = *start + left * *step_ms_;
  c.slack_ms = slack(s, *start, left);
}

std::optional<double> preemption_figures::step_allowance_ms(const resident_progress& s) const {
  if (slo_ == nullptr || !step_ms_ || s.generated == 0 || s.ttft_ms > slo_->of(s.cls).ttft_ms)
    return std::nullopt;
  const double left = outputs_.expected_remaining(s.generated, s.max_tokens);
  if (left < 1.0)
    return std::nullopt;
  const double gaps = double(s.generated) - 1.0 + left;
  return (slo_->of(s.cls).tpot_ms * gaps - s.elapsed_ms) / left;
}

double preemption_figures::slack(const resident_progress& s, double ahead_ms, double left) const {
  if (slo_ == nullptr)
    return preemption_case::unknown;
  const auto& objective = slo_->of(s.cls);
  if (s.generated == 0)
    return objective.ttft_ms - s.elapsed_ms - ahead_ms;
  // The mean gap over its whole output: the gaps so far and the ones to come.
  const double gaps = std::max(1.0, double(s.generated) + left - 1.0);
  return objective.tpot_ms * gaps - s.elapsed_ms - ahead_ms - left * *step_ms_;
}

} // namespace kvlane::actors
