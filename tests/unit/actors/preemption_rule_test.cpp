// The preemption rule on plain figures: an eviction goes ahead only when it costs less than
// the wait it avoids, never for a victim that ends before the eviction is done, and by the
// rank order alone while nothing is known.
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
