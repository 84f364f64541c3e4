#include "actors/step_composer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlane::actors {

namespace {

/// The prefill tokens a step may carry beside batch prefill: what the
/// tightest allowance the decode rows alone keep pays for, at most `budget`.
std::uint32_t batch_prefill_budget(std::span<const step_candidate* const> decodes,
                                   const step_limits& limits, std::uint32_t budget) {
  if (!limits.cost || limits.cost->per_token_ms <= 0)
    return budget;
  const double decode_step =
    limits.cost->base_ms + limits.cost->per_token_ms * static_cast<double>(decodes.size());
  double tightest = std::numeric_limits<double>::infinity();
  for (auto* c : decodes)
    if (c->step_allowance_ms >= decode_step)
      tightest = std::min(tightest, c->step_allowance_ms);
  if (!std::isfinite(tightest))
    return budget;
  // A token's gap is its step plus the host's time between steps, and the fit has its error:
  // the step is held to a tenth under the allowance.
  constexpr double margin = 0.9;
  const double tokens = std::floor(std::max(0.0, margin * tightest - decode_step)
                                   / limits.cost->per_token_ms);
  return static_cast<std::uint32_t>(std::min<double>(tokens, budget));
}

} // namespace

std::vector<step_row_plan> compose_step(std::span<const step_candidate> candidates,
                                        step_limits limits) {
  std::vector<const step_candidate*> decodes, prefills;
  for (auto& c : candidates)
    (c.decodes() ? decodes : prefills).push_back(&c);
  std::sort(decodes.begin(), decodes.end(), [](auto* a, auto* b) { return a->id < b->id; });
  std::sort(prefills.begin(), prefills.end(),
            [](auto* a, auto* b) { return ranks_before(*a->position, *b->position); });

  std::vector<step_row_plan> rows;
  rows.reserve(decodes.size() + prefills.size());
  std::uint32_t budget = limits.max_step_tokens ? limits.max_step_tokens
                                                : std::numeric_limits<std::uint32_t>::max();
  std::uint32_t prefilled = 0; // prefill tokens in the step so far, any class
  for (auto* c : decodes) {
    rows.push_back({c->id, 1, false});
    budget -= std::min(budget, 1u);
  }
  const auto batch_budget = batch_prefill_budget(decodes, limits, budget);
  for (auto* c : prefills) {
    // Prefills are in class order: the first batch one ends an interactive step.
    if (limits.batch_prefill_yields && c->position->cls != prefills.front()->position->cls)
      break;
    auto left = c->length - c->kv_len;
    auto n = std::min({left, limits.max_prefill_chunk, budget});
    if (c->position->cls == priority_class::batch)
      n = std::min(n, batch_budget - std::min(batch_budget, prefilled));
    if (n == 0)
      break;
    rows.push_back({c->id, n, true});
    budget -= n;
    prefilled += n;
  }
  return rows;
}

} // namespace kvlane::actors
