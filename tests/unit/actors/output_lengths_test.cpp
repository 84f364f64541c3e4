// How many more tokens a running sequence is expected to generate, from finished lengths:
// the window's mean residual length, "as long again" past every finished length, capped by
// max_tokens, and a window that forgets the oldest.
#include "actors/output_lengths.hpp"

#include <doctest/doctest.h>

using kvlane::actors::output_lengths;

TEST_CASE("output_lengths: the expected rest is the mean residual of the finished lengths above "
          "what was generated") {
  output_lengths o;
  for (std::uint32_t l : {10u, 20u, 30u, 100u})
    o.observe(l);
  CHECK(o.expected_remaining(0, 1000) == doctest::Approx(40.0));       // mean of all
  CHECK(o.expected_remaining(15, 1000) == doctest::Approx(50.0 - 15)); // mean of 20, 30, 100
  CHECK(o.expected_remaining(30, 1000) == doctest::Approx(70.0));      // only 100 is longer
}

TEST_CASE("output_lengths: a sequence past every finished length is expected to run as long "
          "again, at least one token") {
  output_lengths o;
  CHECK(o.expected_remaining(0, 1000) == doctest::Approx(1.0)); // nothing finished yet
  CHECK(o.expected_remaining(64, 1000) == doctest::Approx(64.0));
  o.observe(10);
  CHECK(o.expected_remaining(10, 1000) == doctest::Approx(10.0));
  CHECK(o.expected_remaining(200, 1000) == doctest::Approx(200.0));
}

TEST_CASE("output_lengths: max_tokens caps the estimate and nothing remains at it") {
  output_lengths o;
  o.observe(500);
  CHECK(o.expected_remaining(0, 100) == doctest::Approx(100.0));
  CHECK(o.expected_remaining(90, 100) == doctest::Approx(10.0));
  CHECK(o.expected_remaining(100, 100) == 0.0);
  CHECK(o.expected_remaining(120, 100) == 0.0);
}

TEST_CASE("output_lengths: the window keeps the last lengths only") {
  output_lengths o{3};
  for (std::uint32_t l : {1000u, 1000u, 1000u, 10u, 10u, 10u})
    o.observe(l);
  CHECK(o.size() == 3);
  CHECK(o.expected_remaining(0, 5000) == doctest::Approx(10.0));
  o.observe(40);
  CHECK(o.expected_remaining(0, 5000) == doctest::Approx(20.0));
}
