// The share of transfer time that cost nothing, on scripted runs whose answer is known.
#include "tools/bench/hidden_cost.hpp"

#include <doctest/doctest.h>

#include <cmath>

using kvlane::tools::bench::hidden_cost_input;
using kvlane::tools::bench::hidden_cost_share;

TEST_CASE("bench hidden cost: a transfer fully under steps that ran as modeled is hidden") {
  // 100 ms of transfer, all of it alongside steps; 1000 ms of steps, modeled 1000.
  CHECK(hidden_cost_share({100, 100, 1000, 1000, 1.0, false}) == doctest::Approx(1.0));
}

TEST_CASE("bench hidden cost: steps lengthened by a shared-bandwidth transfer hide only what "
          "they did not lose") {
  // The device splits bandwidth: 100 ms of transfer under steps that took 60 ms
  // longer than modeled. 40 ms of it was free.
  CHECK(hidden_cost_share({100, 100, 1060, 1000, 1.0, false}) == doctest::Approx(0.4));
  // As much lengthening as transfer time: nothing was hidden, though every
  // transfer co-occurred with a step.
  CHECK(hidden_cost_share({100, 100, 1100, 1000, 1.0, false}) == doctest::Approx(0.0));
  CHECK(hidden_cost_share({100, 100, 1500, 1000, 1.0, false}) == doctest::Approx(0.0));
}

TEST_CASE("bench hidden cost: transfer time no step covered is exposed") {
  // 30 of 100 ms had the compute lane idle (an admission waited on a load).
  CHECK(hidden_cost_share({100, 70, 1000, 1000, 1.0, false}) == doctest::Approx(0.7));
  CHECK(hidden_cost_share({100, 70, 1010, 1000, 1.0, false}) == doctest::Approx(0.6));
}

TEST_CASE("bench hidden cost: host overhead seen with free transfers is not charged to "
          "transfers") {
  // free-transfer's steps took 1.1x their model on this machine: 1100 ms of
  // measured steps for 1000 modeled is host overhead, not transfer cost.
  CHECK(hidden_cost_share({100, 100, 1100, 1000, 1.1, false}) == doctest::Approx(1.0));
  CHECK(hidden_cost_share({100, 100, 1150, 1000, 1.1, false}) == doctest::Approx(0.5));
}

TEST_CASE("bench hidden cost: serialized transfers hide nothing and a run without transfers "
          "has no figure") {
  CHECK(hidden_cost_share({100, 100, 1000, 1000, 1.0, true}) == 0.0);
  CHECK(std::isnan(hidden_cost_share({0, 0, 1000, 1000, 1.0, false})));
  CHECK(std::isnan(hidden_cost_share({100, 100, 1000, 0, 1.0, false}))); // no step model
}
