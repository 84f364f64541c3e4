#include "ipc/write_pacer.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane::ipc;
using std::chrono::nanoseconds;

namespace {

constexpr std::uint64_t mib = 1 << 20;

/// Charges `chunks` chunks of `chunk` bytes back to back, each written as
/// soon as the pacer allows (a simulated clock, advanced by the waits and by
/// `work` per chunk). Returns when each chunk was written.
std::vector<nanoseconds> run(write_pacer& sut, int chunks, std::uint64_t chunk,
                             nanoseconds work = nanoseconds(0)) {
  std::vector<nanoseconds> at;
  nanoseconds now{1'000'000'000};
  for (int i = 0; i < chunks; ++i) {
    now += sut.charge(chunk, now);
    at.push_back(now);
    now += work;
  }
  return at;
}

} // namespace

TEST_CASE("write_pacer: at most rate * t + burst bytes are let through by any time t") {
  write_pacer sut(10 * mib, 4 * mib);
  const auto at = run(sut, 100, mib);
  const nanoseconds start = at.front();
  for (std::size_t i = 0; i < at.size(); ++i) {
    const double t = std::chrono::duration<double>(at[i] - start).count();
    const double through = static_cast<double>((i + 1) * mib);
    CAPTURE(i);
    CHECK(through <= 10.0 * mib * t + 4.0 * mib + 1);
  }
  // And no slower than the rate: 100 MiB at 10 MiB/s, less the burst.
  const double total = std::chrono::duration<double>(at.back() - start).count();
  CHECK(total == doctest::Approx(9.6).epsilon(0.01));
}

TEST_CASE("write_pacer: the burst goes at once") {
  write_pacer sut(10 * mib, 4 * mib);
  const auto at = run(sut, 4, mib);
  CHECK(at.back() == at.front());
}

TEST_CASE("write_pacer: time spent idle refills the bucket, but never beyond the burst") {
  write_pacer sut(10 * mib, 2 * mib);
  nanoseconds now{0};
  CHECK(sut.charge(2 * mib, now) == nanoseconds(0));
  // A minute later: the bucket is full again (2 MiB), not 600 MiB.
  now += std::chrono::minutes(1);
  CHECK(sut.charge(2 * mib, now) == nanoseconds(0));
  CHECK(sut.charge(mib, now) == nanoseconds(100'000'000));
}

TEST_CASE("write_pacer: slow work below the rate is never delayed") {
  write_pacer sut(10 * mib, mib);
  // Each 1 MiB chunk takes 200 ms of work: 5 MiB/s, under the bound.
  const auto at = run(sut, 20, mib, std::chrono::milliseconds(200));
  for (std::size_t i = 1; i < at.size(); ++i)
    CHECK(at[i] - at[i - 1] == std::chrono::milliseconds(200));
}

TEST_CASE("write_pacer: a rate of 0 is unbounded") {
  write_pacer sut(0, 0);
  CHECK(sut.charge(1ull << 40, nanoseconds(5)) == nanoseconds(0));
}
