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

bool latency_saved(const preemption_case& c) noexcept {
  return c.eviction_ms + c.others_delay_ms < c.wait_avoided_ms;
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
  // A waiter whose objective the eviction does not decide is not helped at
  // another's expense: it goes ahead only where the victim loses nothing that
  // counts. One that misses it either way goes ahead only over a lower class
  // (an interactive request's wait stays short); one that meets it anyway
  // where the wait it avoids is more than the delay the eviction adds to
  // everyone (latency, not objectives, decides), and only over a victim that
  // was not evicted before (latency slices a run once).
  if (eviction_breaks_victim(c))
    return false;
  if (eviction_misses_waiter_anyway(c))
    return c.waiter_outranks;
  return !c.victim_preempted_before && latency_saved(c);
}

} // namespace kvlane::actors
