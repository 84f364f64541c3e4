#include "actors/step_composer.hpp"

#include <algorithm>
#include <limits>

namespace kvlane::actors {

std::vector<step_row_plan> compose_step(std::span<const step_candidate> candidates,
                                        step_limits limits) {
  std::vector<const step_candidate*> decodes, prefills;
  for (auto& c : candidates)
    (c.kv_len + 1 == c.length ? decodes : prefills).push_back(&c);
  std::sort(decodes.begin(), decodes.end(), [](auto* a, auto* b) { return a->id < b->id; });
  std::sort(prefills.begin(), prefills.end(),
            [](auto* a, auto* b) { return ranks_before(*a->position, *b->position); });

  std::vector<step_row_plan> rows;
  rows.reserve(decodes.size() + prefills.size());
  std::uint32_t budget = limits.max_step_tokens ? limits.max_step_tokens
                                                : std::numeric_limits<std::uint32_t>::max();
  for (auto* c : decodes) {
    rows.push_back({c->id, 1, false});
    budget -= std::min(budget, 1u);
  }
  for (auto* c : prefills) {
    // Prefills are in class order: the first batch one ends an interactive step.
    if (limits.batch_prefill_yields && c->position->cls != prefills.front()->position->cls)
      break;
    auto left = c->length - c->kv_len;
    auto n = std::min({left, limits.max_prefill_chunk, budget});
    if (n == 0)
      break;
    rows.push_back({c->id, n, true});
    budget -= n;
  }
  return rows;
}

} // namespace kvlane::actors
