// The bench's turn gate: a conversation's turn is not sent before the
// previous turn has ended; every other request goes at its trace time.
#include "tools/bench/bench_runner.hpp"
#include "tools/bench/turn_gate.hpp"

#include <doctest/doctest.h>

#include <thread>

using namespace kvlane::tools::bench;
using namespace std::chrono_literals;
using clock_type = turn_gate::clock;

namespace {

trace_request at(double arrival_s, std::int32_t previous = -1) {
  trace_request r;
  r.arrival_s = arrival_s;
  r.previous_turn = previous;
  return r;
}

// Arrivals in simulated seconds at time_scale 1000: 1 s = 1 wall ms.
constexpr double scale = 1000;

} // namespace

TEST_CASE("turn gate: a held turn goes when its previous turn ends, the others at their times") {
  const std::vector<trace_request> reqs{at(0), at(1, 0), at(2)};
  const auto start = clock_type::now();
  turn_gate sut{reqs, start, scale};
  const auto deadline = start + 60s;

  auto a = sut.next(deadline);
  REQUIRE(a);
  CHECK(a->index == 0);
  CHECK_FALSE(a->held);
  // Request 1 is due but 0 has not ended: it is skipped, 2 goes.
  auto c = sut.next(deadline);
  REQUIRE(c);
  CHECK(c->index == 2);
  CHECK_FALSE(c->held);
  CHECK(c->due >= start + 2ms);
  // 0 ends (after 1's trace time): 1 is released, held, due at that end.
  const auto before_end = clock_type::now();
  sut.ended(0);
  auto b = sut.next(deadline);
  REQUIRE(b);
  CHECK(b->index == 1);
  CHECK(b->held);
  CHECK(b->due >= before_end);
  CHECK_FALSE(sut.next(deadline).has_value()); // all released
}

TEST_CASE("turn gate: a turn whose previous turn ended before its trace time goes at that time") {
  const std::vector<trace_request> reqs{at(0), at(1, 0)};
  // The run starts 20 ms from now, so request 0's end below is reported
  // before request 1's trace time whatever the machine's load.
  const auto start = clock_type::now() + 20ms;
  turn_gate sut{reqs, start, scale};
  sut.ended(0);
  REQUIRE(sut.next(start + 60s)->index == 0);
  auto b = sut.next(start + 60s);
  REQUIRE(b);
  CHECK(b->index == 1);
  CHECK_FALSE(b->held);
  CHECK(b->due == start + 1ms);
}

TEST_CASE("turn gate: an end reported from another thread wakes the driver waiting for it") {
  const std::vector<trace_request> reqs{at(0), at(0, 0)};
  turn_gate sut{reqs, clock_type::now(), scale};
  REQUIRE(sut.next(clock_type::now() + 60s)->index == 0);
  // The driver waits for request 1; the end may come before or after it
  // starts waiting: either way 1 is released.
  std::thread sink{[&] { sut.ended(0); }};
  auto b = sut.next(clock_type::now() + 60s);
  sink.join();
  REQUIRE(b);
  CHECK(b->index == 1);
  // Reporting an end twice, or of an unknown request, changes nothing.
  sut.ended(0);
  sut.ended(99);
  CHECK_FALSE(sut.next(clock_type::now() + 60s).has_value());
}

TEST_CASE("turn gate: at the deadline a turn whose previous turn never ended is not sent") {
  const std::vector<trace_request> reqs{at(0), at(0, 0), at(0, 1)};
  turn_gate sut{reqs, clock_type::now(), scale};
  REQUIRE(sut.next(clock_type::now() + 60s)->index == 0);
  CHECK_FALSE(sut.next(clock_type::now() + 20ms).has_value());

  std::vector<request_outcome> outcomes(3);
  outcomes[0].submitted = true;
  note_unsent(outcomes);
  CHECK(outcomes[0].error.empty());
  CHECK(outcomes[1].error.find("not sent") != std::string::npos);
  CHECK(outcomes[2].error.find("previous turn") != std::string::npos);
}

TEST_CASE("turn gate: a previous turn that is not earlier is ignored rather than waited for") {
  const std::vector<trace_request> reqs{at(0, 1), at(0, 1), at(0)};
  turn_gate sut{reqs, clock_type::now(), scale};
  for (std::size_t want = 0; want < 3; ++want) {
    auto r = sut.next(clock_type::now() + 60s);
    REQUIRE(r);
    CHECK(r->index == want);
    CHECK_FALSE(r->held);
  }
}
