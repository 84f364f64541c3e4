#include "actors/preemption_rule.hpp"

#include <algorithm>
#include <cmath>

namespace kvlane::actors {

namespace {

bool known(double v) noexcept { return std::isfinite(v); }

} // namespace

bool eviction_saves_waiter(const preemption_case& c) noexcept {
  if (!known(c.waiter_slack_ms) || !known(c.wait_avoided_ms))
    return true;
  return c.wait_avoided_ms > c.waiter_slack_ms && c.eviction_ms <= c.waiter_slack_ms;
}

bool eviction_misses_waiter_anyway(const preemption_case& c) noexcept {
  return known(c.waiter_slack_ms) && c.eviction_ms > c.waiter_slack_ms;
}

bool eviction_breaks_victim(const preemption_case& c) noexcept {
  if (!known(c.victim_slack_ms) || c.victim_slack_ms < 0)
    return false; // not known, or missed anyway
  const double back_in = std::min(c.waiter_service_ms, c.wait_avoided_ms);
  if (!known(back_in))
    return false;
  return c.eviction_ms + back_in > c.victim_slack_ms;
}

bool preemption_pays(const preemption_case& c) noexcept {
  if (!(c.eviction_ms > 0))
    return true; // nothing known (or nothing to pay): the rank order decides
  if (c.victim_at_most_ms <= c.eviction_ms || c.victim_expected_ms <= c.eviction_ms)
    return false; // the victim's own end frees the slot sooner
  if (!(c.eviction_ms < c.wait_avoided_ms))
    return false;
  if (eviction_saves_waiter(c))
    return c.waiter_outranks || !eviction_breaks_victim(c);
  // A waiter that misses its objective either way is not helped at another's
  // expense, but a higher class still goes first where the victim loses
  // nothing that counts (an interactive request's wait stays short).
  return c.waiter_outranks && eviction_misses_waiter_anyway(c) && !eviction_breaks_victim(c);
}

} // namespace kvlane::actors
