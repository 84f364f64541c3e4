// Tokens per second counted only while requests waited, on scripted timelines.
#include "tools/bench/saturation.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace kvlane::tools::bench;

namespace {

timeline_sample at(double t_s, std::uint32_t waiting, std::uint64_t tokens) {
  timeline_sample s;
  s.t_s = t_s;
  s.without_slot_batch = waiting;
  s.tokens_generated = tokens;
  return s;
}

} // namespace

TEST_CASE("bench saturation: only intervals with a request waiting at both ends count") {
  std::vector<timeline_sample> timeline{
    at(0, 0, 0),    // idle start
    at(1, 2, 10),   // 0..1: not counted (nobody waited at 0)
    at(2, 3, 110),  // 1..2: 100 tokens
    at(3, 1, 210),  // 2..3: 100 tokens
    at(4, 0, 250),  // 3..4: not counted (drained)
    at(5, 0, 260),
  };
  auto sut = saturation_throughput(timeline);
  CHECK(sut.saturated_s == doctest::Approx(2));
  CHECK(sut.tok_s == doctest::Approx(100));
}

TEST_CASE("bench saturation: a run that never saturated has no figure") {
  std::vector<timeline_sample> timeline{at(0, 0, 0), at(1, 0, 50), at(2, 1, 80)};
  auto sut = saturation_throughput(timeline);
  CHECK(sut.saturated_s == 0);
  CHECK(std::isnan(sut.tok_s));
  CHECK(std::isnan(saturation_throughput({}).tok_s));
}

TEST_CASE("bench saturation: interactive waiters count as well") {
  std::vector<timeline_sample> timeline{at(0, 0, 0), at(2, 0, 40)};
  timeline[0].without_slot_interactive = 1;
  timeline[1].without_slot_interactive = 1;
  CHECK(saturation_throughput(timeline).tok_s == doctest::Approx(20));
}
