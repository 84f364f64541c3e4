#include "actors/preemption_rule.hpp"

namespace kvlane::actors {

bool preemption_pays(const preemption_case& c) noexcept {
  if (!(c.eviction_ms > 0))
    return true; // nothing known (or nothing to pay): the rank order decides
  if (c.victim_at_most_ms <= c.eviction_ms || c.victim_expected_ms <= c.eviction_ms)
    return false; // the victim's own end frees the slot sooner
  return c.eviction_ms < c.wait_avoided_ms;
}

} // namespace kvlane::actors
