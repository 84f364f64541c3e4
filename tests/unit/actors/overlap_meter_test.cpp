// How much transfer time the steps hid, on fixed time points.
#include "actors/overlap_meter.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::overlap_meter;

namespace {

const overlap_meter::time_point t0{};

overlap_meter::time_point at(std::chrono::milliseconds ms) { return t0 + ms; }

} // namespace

TEST_CASE("overlap_meter: counts the part of a transfer that recorded steps covered") {
  overlap_meter sut;
  sut.add_step(at(0ms), at(10ms));
  sut.add_step(at(12ms), at(20ms));
  sut.add_step(at(40ms), at(50ms));
  CHECK(sut.hidden_ms(at(5ms), at(30ms), std::nullopt) == doctest::Approx(13)); // 5 + 8
  CHECK(sut.hidden_ms(at(20ms), at(40ms), std::nullopt) == doctest::Approx(0));
  CHECK(sut.hidden_ms(at(-5ms), at(60ms), std::nullopt) == doctest::Approx(28));
}

TEST_CASE("overlap_meter: a running step hides the transfer from its start on, never more than "
          "the transfer lasted") {
  overlap_meter sut;
  sut.add_step(at(0ms), at(10ms));
  CHECK(sut.hidden_ms(at(5ms), at(30ms), at(12ms)) == doctest::Approx(5 + 18));
  CHECK(sut.hidden_ms(at(5ms), at(30ms), at(40ms)) == doctest::Approx(5));
  CHECK(sut.hidden_ms(at(5ms), at(30ms), at(0ms)) == doctest::Approx(25)); // capped
}

TEST_CASE("overlap_meter: keeps at least the last 32 steps and forgets older ones") {
  overlap_meter sut;
  for (int i = 0; i < 65; ++i) {
    auto start = at(std::chrono::milliseconds{i * 10});
    sut.add_step(start, start + 5ms);
  }
  // Steps 0..31 are forgotten, 32..64 are kept.
  CHECK(sut.hidden_ms(at(0ms), at(320ms), std::nullopt) == doctest::Approx(0));
  CHECK(sut.hidden_ms(at(320ms), at(650ms), std::nullopt) == doctest::Approx(33 * 5));
}
