// The soak's tally of its apps' reports: what the soak causes on purpose is
// counted apart; anything else, or a run with no completion, is not clean.
#include "tools/soak/app_report.hpp"

#include <doctest/doctest.h>

using namespace kvlane::tools::soak;

namespace {

/// A run with one completion and every expected outcome the soak causes.
tally expected_outcomes() {
  tally sut;
  for (std::uint64_t k = 1; k <= 4; ++k)
    sut.take(submitted_line(k));
  sut.take(ended_line(1, "length", 16, 16, 99, false, ""));
  sut.take(ended_line(2, "cancelled", 3, 3, 98, true, "cancelled by the client"));
  sut.take(ended_line(3, "error", 5, 5, 97, false,
                      "the NPU failed this request's step row 2 times when it ran alone, "
                      "recomputing it in between: sim: injected device_failure on step call 812"));
  sut.take(abandoned_line(4));
  return sut;
}

} // namespace

TEST_CASE("app_report: completions, the app's cancels, injected faults and abandoned streams "
          "are expected") {
  const auto sut = expected_outcomes();
  CHECK(sut.clean());
  CHECK(sut.submitted == 4);
  CHECK(sut.completed() == 1);
  CHECK(sut.cancelled_by_app == 1);
  CHECK(sut.ended_by_injected == 1);
  CHECK(sut.abandoned == 1);
  CHECK(sut.unexpected() == 0);
  CHECK(sut.examples.empty());
  REQUIRE(sut.ended.count(1) == 1);
  CHECK(sut.ended.at(1).received == 16);
  CHECK(sut.ended.at(1).generated == 16);
  CHECK(sut.ended.at(1).hash == 99);
  CHECK(sut.ended.at(3).injected);
}

TEST_CASE("app_report: a run without one completion is not clean") {
  tally sut;
  sut.take(submitted_line(1));
  sut.take(ended_line(1, "cancelled", 3, 3, 98, true, ""));
  CHECK(sut.unexpected() == 0);
  CHECK(sut.completed() == 0);
  CHECK_FALSE(sut.clean());
  CHECK_FALSE(tally{}.clean());
}

TEST_CASE("app_report: refused connects and submits and failed streams are unexpected, by code") {
  auto sut = expected_outcomes();
  sut.take(refused_connect_line("busy", "uid 0 already has 16 connection(s); retry after 200 ms"));
  sut.take(refused_connect_line("busy", "uid 0 already has 16 connection(s); retry after 200 ms"));
  sut.take(refused_submit_line(5, "too_long", "prompt too long"));
  sut.take(failed_line(6, "connection_lost", "the daemon closed the connection"));
  CHECK_FALSE(sut.clean());
  CHECK(sut.unexpected() == 4);
  CHECK(by_kind(sut.refused_connects) == "busy 2");
  CHECK(by_kind(sut.refused_submits) == "too_long 1");
  CHECK(by_kind(sut.failed_streams) == "connection_lost 1");
  // The same report twice is one example.
  CHECK(sut.examples.size() == 3);
  CHECK(sut.examples[0] == "C busy uid 0 already has 16 connection(s); retry after 200 ms");
}

TEST_CASE("app_report: an error the soak did not inject, a cancel the app did not send and a "
          "backlog end are unexpected") {
  auto sut = expected_outcomes();
  sut.take(ended_line(7, "error", 2, 2, 1, false, "model 'soak' failed: its scheduler stopped"));
  sut.take(ended_line(8, "cancelled", 2, 2, 1, false, ""));
  sut.take(ended_line(9, "backlog", 2, 2, 1, false, ""));
  CHECK_FALSE(sut.clean());
  CHECK(by_kind(sut.errored_streams) == "backlog 1, cancelled 1, error 1");
  CHECK(sut.examples.front() == "E 7 error 2 2 1 0 0 model 'soak' failed: its scheduler stopped");
  // Still ended: their tokens are checked like any other end's.
  CHECK(sut.ended.size() == 6);
}

TEST_CASE("app_report: a crashed app and an unreadable line are unexpected") {
  auto sut = expected_outcomes();
  sut.app_crashed("app 4242 died of signal 11");
  CHECK(sut.apps_crashed == 1);
  sut.take("E 10 length");
  sut.take("garbage");
  CHECK(by_kind(sut.errored_streams) == "unreadable 2");
  CHECK(sut.unexpected() == 3);
  CHECK_FALSE(sut.clean());
}

TEST_CASE("app_report: a message with newlines stays on its line") {
  const auto line = ended_line(1, "error", 0, 0, 0, false, "two\nlines");
  CHECK(line == "E 1 error 0 0 0 0 0 two lines");
  CHECK(failed_line(2, "internal", "") == "F 2 internal -");
}
