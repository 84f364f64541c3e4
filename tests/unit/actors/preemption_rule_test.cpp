// The preemption rule on plain figures: an eviction goes ahead only when it costs less than
// the wait it avoids, never for a victim that ends before the eviction is done, and by the
// rank order alone while nothing is known; where the objectives are known, only when it saves
// the waiter's and does not break the victim's (unless the waiter's class is higher), and
// latency alone takes a victim's slot only once.
#include "actors/preemption_rule.hpp"

#include <doctest/doctest.h>

#include <cmath>

using kvlane::actors::preemption_case;
using kvlane::actors::preemption_pays;

TEST_CASE("preemption_rule: an eviction pays when it costs less than the wait it avoids") {
  CHECK(preemption_pays({40, 5000, 9000, 41}));
  CHECK_FALSE(preemption_pays({40, 5000, 9000, 40}));
  CHECK_FALSE(preemption_pays({40, 5000, 9000, 10}));
}

TEST_CASE("preemption_rule: a victim expected to end before its eviction is done is kept") {
  CHECK_FALSE(preemption_pays({40, 39, 9000, preemption_case::unknown}));
  CHECK_FALSE(preemption_pays({40, 40, 9000, 1e9}));
  CHECK(preemption_pays({40, 41, 9000, 1e9}));
}

TEST_CASE("preemption_rule: a victim whose max_tokens ends it before its eviction is done is kept, "
          "whatever its expected length") {
  CHECK_FALSE(preemption_pays({40, preemption_case::unknown, 30, 1e9}));
  CHECK(preemption_pays({40, preemption_case::unknown, 50, 1e9}));
}

TEST_CASE("preemption_rule: with no wait known (restoring the spare) only the victim's end can "
          "veto") {
  CHECK(preemption_pays({40, 500, 900, preemption_case::unknown}));
  CHECK_FALSE(preemption_pays({40, 20, 900, preemption_case::unknown}));
}

TEST_CASE("preemption_rule: an unknown or zero eviction cost leaves the choice to the rank order") {
  CHECK(preemption_pays({0, 1, 1, 1}));
  CHECK(preemption_pays({std::nan(""), 1, 1, 1}));
  CHECK(preemption_pays({}));
}

namespace {

// A 40 ms eviction for a waiter that would otherwise wait 1 s for a slot.
preemption_case goodput_case(double waiter_slack, double victim_slack) {
  preemption_case c{40, 5000, 9000, 1000};
  c.waiter_slack_ms = waiter_slack;
  c.waiter_service_ms = 3000;
  c.victim_slack_ms = victim_slack;
  return c;
}

} // namespace

TEST_CASE("preemption_rule: an eviction that saves the waiter's objective goes ahead; one that "
          "does not goes ahead only for a waiter that meets it anyway") {
  CHECK(preemption_pays(goodput_case(500, 1e9)));  // waiting 1 s misses, 40 ms meets
  CHECK(preemption_pays(goodput_case(1000, 1e9))); // meets it anyway: starts sooner, no one loses
  CHECK_FALSE(preemption_pays(goodput_case(30, 1e9)));   // misses it either way: demoted
  CHECK_FALSE(preemption_pays(goodput_case(-5, 1e9)));   // already past it
  CHECK(preemption_pays(goodput_case(preemption_case::unknown, 1e9))); // not known: rank order
}

TEST_CASE("preemption_rule: a waiter that meets its objective anyway never costs the victim its "
          "own, whatever its class") {
  // The victim stalls for the eviction and until a slot frees (1 s here): 1,040 ms.
  CHECK(preemption_pays(goodput_case(1000, 1040)));
  CHECK_FALSE(preemption_pays(goodput_case(1000, 1039)));
  auto higher = goodput_case(1000, 1039);
  higher.waiter_outranks = true;
  CHECK_FALSE(preemption_pays(higher));
  // Still the cost first: an eviction dearer than the wait it avoids never pays.
  auto dear = goodput_case(1000, 1e9);
  dear.eviction_ms = 1000;
  CHECK_FALSE(preemption_pays(dear));
}

TEST_CASE("preemption_rule: for a waiter that meets its objective anyway, the delay the eviction "
          "adds to the other slot holders counts against the wait it avoids") {
  auto stalls = goodput_case(1000, 1e9); // 40 ms eviction, 1 s wait avoided
  stalls.others_delay_ms = 959;          // 40 + 959 < 1000: still cuts the total wait
  CHECK(preemption_pays(stalls));
  stalls.others_delay_ms = 960;
  CHECK_FALSE(preemption_pays(stalls));
  // Where the eviction decides the waiter's objective, the objective decides.
  auto saves = goodput_case(500, 1e9);
  saves.others_delay_ms = 5000;
  CHECK(preemption_pays(saves));
}

TEST_CASE("preemption_rule: latency alone takes a victim's slot once; a victim evicted before "
          "gives it again only to save the waiter's objective or to a higher class that misses "
          "its own anyway") {
  auto meets = goodput_case(1000, 1e9); // meets it anyway, 1 s of wait avoided
  CHECK(preemption_pays(meets));
  meets.victim_preempted_before = true;
  CHECK_FALSE(preemption_pays(meets));
  auto saves = goodput_case(500, 1e9);
  saves.victim_preempted_before = true;
  CHECK(preemption_pays(saves));
  auto late = goodput_case(30, 1e9);
  late.waiter_outranks = true;
  late.victim_preempted_before = true;
  CHECK(preemption_pays(late));
}

TEST_CASE("preemption_rule: an eviction that saves the waiter's objective but breaks the "
          "victim's goes ahead only for a waiter of a higher class") {
  // The victim stalls for the eviction and until a slot frees (1 s here): 1,040 ms.
  CHECK(preemption_pays(goodput_case(500, 1040)));
  CHECK_FALSE(preemption_pays(goodput_case(500, 1039)));
  auto higher = goodput_case(500, 1039);
  higher.waiter_outranks = true;
  CHECK(preemption_pays(higher));
  // A victim that misses its objective anyway loses nothing that counts.
  CHECK(preemption_pays(goodput_case(500, -1)));
  // The waiter's short run brings the victim back sooner than the soonest other end.
  auto short_waiter = goodput_case(500, 500);
  short_waiter.waiter_service_ms = 400;
  CHECK(preemption_pays(short_waiter));
}

TEST_CASE("preemption_rule: a waiter that misses its objective either way evicts only a lower "
          "class, and only a victim that keeps its own objective") {
  auto late = goodput_case(30, 1e9); // misses it even with the 40 ms eviction
  CHECK_FALSE(preemption_pays(late));
  late.waiter_outranks = true;
  CHECK(preemption_pays(late));
  auto late_tight = goodput_case(-5, 1039); // the victim would stall past its slack
  late_tight.waiter_outranks = true;
  CHECK_FALSE(preemption_pays(late_tight));
}

TEST_CASE("preemption_rule: restoring the spare for no waiter is vetoed only by the victim's "
          "end, whatever its slack") {
  preemption_case c{40, 500, 900, preemption_case::unknown};
  c.victim_slack_ms = 10;
  CHECK(preemption_pays(c));
}
