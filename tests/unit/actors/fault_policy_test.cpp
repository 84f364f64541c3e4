// The fault policy on plain values and an injected clock: retry, isolation,
// blame, backoff, give-up and recovery.
#include "actors/fault_policy.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane;
using actors::device_health;
using actors::failed_sequence;
using actors::fault_knobs;
using actors::fault_policy;
using actors::next_step;
using actors::seq_id;
using namespace std::chrono_literals;

namespace {

const fault_policy::clock::time_point t0{};

fault_knobs knobs(std::uint32_t retries = 1, std::uint32_t recomputes = 1,
                  std::uint32_t give_up = 3) {
  fault_knobs k;
  k.step_retries = retries;
  k.row_recomputes = recomputes;
  k.backoff_initial_ms = 10;
  k.backoff_max_ms = 40;
  k.give_up_steps = give_up;
  return k;
}

const std::vector<seq_id> rows_1234{1, 2, 3, 4};

/// Fails the whole step and its retries, so that the rows run alone next.
void fail_until_isolating(fault_policy& sut, const std::vector<seq_id>& rows) {
  for (std::uint32_t i = 0; i <= sut.knobs().step_retries; ++i)
    CHECK(sut.step_failed(rows, t0).empty());
  REQUIRE(sut.next(t0).what == next_step::kind::isolate);
}

} // namespace

TEST_CASE("fault_policy: a transient failure is retried once and ends nothing") {
  fault_policy sut{knobs()};
  CHECK(sut.health() == device_health::healthy);
  CHECK(sut.step_failed(rows_1234, t0).empty());
  CHECK(sut.health() == device_health::degraded);
  CHECK_FALSE(sut.admits());
  const auto n = sut.next(t0);
  CHECK(n.what == next_step::kind::retry);
  CHECK(n.rows == rows_1234);
  CHECK(sut.step_succeeded(rows_1234, t0).empty());
  CHECK(sut.health() == device_health::healthy);
  CHECK(sut.admits());
  CHECK(sut.next(t0).what == next_step::kind::compose);
  CHECK(sut.counters().step_retries == 1);
  CHECK(sut.counters().isolated_rows == 0);
}

TEST_CASE("fault_policy: a step that fails its retries runs its rows one at a time, in order") {
  fault_policy sut{knobs(2)};
  fail_until_isolating(sut, rows_1234);
  CHECK(sut.counters().step_retries == 2);
  for (auto id : rows_1234) {
    const auto n = sut.next(t0);
    REQUIRE(n.what == next_step::kind::isolate);
    CHECK(n.rows == std::vector<seq_id>{id});
    CHECK(sut.step_succeeded(n.rows, t0).empty());
  }
  // Every row passed alone: a transient fault, nothing to blame.
  CHECK(sut.health() == device_health::healthy);
  CHECK(sut.counters().isolated_rows == 4);
  CHECK(sut.counters().row_faults == 0);
}

TEST_CASE("fault_policy: the row that fails alone is recomputed, then failed, and the others "
          "are never charged") {
  fault_policy sut{knobs(1, 1)};
  for (std::uint32_t round = 1; round <= 2; ++round) {
    CAPTURE(round);
    fail_until_isolating(sut, rows_1234);
    actors::fault_actions last;
    for (auto id : rows_1234) {
      const std::vector<seq_id> one{id};
      REQUIRE(sut.next(t0).rows == one);
      if (id == 3) {
        CHECK(sut.step_failed(one, t0).empty()); // retried alone first
        REQUIRE(sut.next(t0).rows == one);
        last = sut.step_failed(one, t0);
      } else {
        last = sut.step_succeeded(one, t0);
      }
    }
    CHECK(sut.health() == device_health::healthy);
    if (round == 1) {
      CHECK(last.recompute == std::vector<seq_id>{3});
      CHECK(last.fail_row.empty());
    } else {
      CHECK(last.recompute.empty());
      CHECK(last.fail_row == std::vector<failed_sequence>{{3, 2}});
    }
    CHECK(last.fail_device.empty());
  }
  CHECK(sut.counters().row_faults == 2);
  CHECK(sut.counters().step_retries == 4); // per round: the whole step once, row 3 alone once
}

TEST_CASE("fault_policy: a row that fails alone once and then succeeds is not blamed") {
  fault_policy sut{knobs(1, 1)};
  fail_until_isolating(sut, rows_1234);
  actors::fault_actions last;
  for (auto id : rows_1234) {
    const std::vector<seq_id> one{id};
    if (id == 2)
      CHECK(sut.step_failed(one, t0).empty());
    REQUIRE(sut.next(t0).rows == one);
    last = sut.step_succeeded(one, t0);
  }
  CHECK(last.empty());
  CHECK(sut.counters().row_faults == 0);
  CHECK(sut.health() == device_health::healthy);
}

TEST_CASE("fault_policy: when every row fails alone the device backs off exponentially up to "
          "the cap, then a probe that succeeds recovers") {
  fault_policy sut{knobs(1, 1, 0)};
  fail_until_isolating(sut, rows_1234);
  for (auto id : rows_1234)
    for (int attempt = 0; attempt < 2; ++attempt) // alone, then its retry
      CHECK(sut.step_failed(std::vector<seq_id>{id}, t0).empty());
  CHECK(sut.health() == device_health::failing);
  CHECK_FALSE(sut.admits());
  CHECK(sut.backoff() == 10ms);
  auto n = sut.next(t0 + 9ms);
  CHECK(n.what == next_step::kind::wait);
  CHECK(n.until == t0 + 10ms);
  CHECK(sut.next(t0 + 10ms).what == next_step::kind::compose); // the probe

  auto now = t0 + 10ms;
  for (auto want : {20ms, 40ms, 40ms}) {
    CHECK(sut.step_failed(rows_1234, now).empty()); // give-up off: nothing ends
    CHECK(sut.backoff() == want);
    CHECK(sut.next(now).until == now + want);
    now += want;
  }
  CHECK(sut.counters().backoffs == 4);
  CHECK(sut.step_succeeded(rows_1234, now).empty());
  CHECK(sut.health() == device_health::healthy);
  CHECK(sut.backoff() == 0ms);
  CHECK(sut.next(now).what == next_step::kind::compose);
}

TEST_CASE("fault_policy: a single-row step that fails its retry is the device's fault") {
  fault_policy sut{knobs()};
  const std::vector<seq_id> one{7};
  CHECK(sut.step_failed(one, t0).empty());
  CHECK(sut.step_failed(one, t0).empty());
  CHECK(sut.health() == device_health::failing);
  CHECK(sut.counters().isolated_rows == 0);
  CHECK(sut.counters().row_faults == 0);
}

TEST_CASE("fault_policy: sequences in give_up_steps failed steps in a row while failing end") {
  fault_policy sut{knobs(0, 1, 3)};
  const std::vector<seq_id> rows{1, 2};
  CHECK(sut.step_failed(rows, t0).empty()); // no retry: isolate at once
  CHECK(sut.step_failed(std::vector<seq_id>{1}, t0).empty());
  CHECK(sut.step_failed(std::vector<seq_id>{2}, t0).empty()); // failing: 1 each
  CHECK(sut.step_failed(rows, t0 + 10ms).empty());            // 2 each
  // Sequence 3 joined the probe late: it has 1.
  const auto out = sut.step_failed(std::vector<seq_id>{1, 2, 3}, t0 + 30ms);
  CHECK(out.fail_device == std::vector<failed_sequence>{{1, 3}, {2, 3}});
  CHECK(out.recompute.empty());
  CHECK(out.fail_row.empty());
}

TEST_CASE("fault_policy: a success resets the run of failed steps") {
  fault_policy sut{knobs(0, 1, 2)};
  const std::vector<seq_id> one{1};
  CHECK(sut.step_failed(one, t0).empty()); // failing, 1
  CHECK(sut.step_succeeded(one, t0 + 10ms).empty());
  CHECK(sut.health() == device_health::healthy);
  CHECK(sut.step_failed(one, t0 + 20ms).empty()); // failing again, 1 (not 2)
  CHECK(sut.health() == device_health::failing);
  CHECK(sut.backoff() == 10ms); // a new episode starts from the initial wait
}

TEST_CASE("fault_policy: rows that end during an episode are dropped from it") {
  SUBCASE("retrying: the last retried row ends, the episode ends") {
    fault_policy sut{knobs()};
    CHECK(sut.step_failed(std::vector<seq_id>{1, 2}, t0).empty());
    CHECK(sut.forget(1, t0).empty());
    CHECK(sut.next(t0).rows == std::vector<seq_id>{2});
    CHECK(sut.forget(2, t0).empty());
    CHECK(sut.health() == device_health::healthy);
    CHECK(sut.next(t0).what == next_step::kind::compose);
  }
  SUBCASE("isolating: the rows still to run end, the round concludes on what it saw") {
    fault_policy sut{knobs(0)};
    CHECK(sut.step_failed(rows_1234, t0).empty());
    CHECK(sut.step_succeeded(std::vector<seq_id>{1}, t0).empty());
    CHECK(sut.step_failed(std::vector<seq_id>{2}, t0).empty());
    CHECK(sut.forget(4, t0).empty());
    const auto out = sut.forget(3, t0);
    CHECK(out.recompute == std::vector<seq_id>{2});
    CHECK(sut.health() == device_health::healthy);
  }
}

TEST_CASE("fault_policy: new knobs apply to the next decision") {
  fault_policy sut{knobs(1)};
  CHECK(sut.step_failed(rows_1234, t0).empty());
  sut.set_knobs(knobs(3));
  CHECK(sut.step_failed(rows_1234, t0).empty()); // retry 2 of 3
  CHECK(sut.next(t0).what == next_step::kind::retry);
  CHECK(sut.counters().step_retries == 2);
}
