// Which requests meet their class's SLO, and how SLO bounds are parsed.
#include "tools/bench/slo.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

request_outcome done(bool interactive, double ttft, double tpot, std::uint32_t generated = 10) {
  request_outcome o;
  o.interactive = interactive;
  o.submitted = o.ended = true;
  o.reason = actors::end_reason::length;
  o.generated = generated;
  o.ttft_ms = ttft;
  o.tpot_ms = tpot;
  return o;
}

} // namespace

TEST_CASE("bench slo: a request meets its own class's TTFT and TPOT bounds, inclusive") {
  slo_set slo;
  slo.interactive = {100, 10};
  slo.batch = {1000, 50};
  CHECK(meets_slo(done(true, 100, 10), slo));
  CHECK_FALSE(meets_slo(done(true, 101, 10), slo));
  CHECK_FALSE(meets_slo(done(true, 100, 11), slo));
  CHECK(meets_slo(done(false, 500, 40), slo)); // too slow for interactive, fine for batch
  CHECK_FALSE(meets_slo(done(false, 1001, 40), slo));
}

TEST_CASE("bench slo: a failed or unfinished request meets no SLO") {
  auto failed = done(true, 1, 1);
  failed.reason = actors::end_reason::error;
  CHECK_FALSE(meets_slo(failed, {}));
  auto unfinished = done(true, 1, 1);
  unfinished.ended = false;
  CHECK_FALSE(meets_slo(unfinished, {}));
}

TEST_CASE("bench slo: a single-token reply has no TPOT and is held to TTFT only") {
  const double none = std::nan("");
  CHECK(meets_slo(done(true, 50, none, 1), {}));
  CHECK_FALSE(meets_slo(done(true, 50, none, 5), {})); // several tokens but no TPOT: not timed
}

TEST_CASE("bench slo: attainment and goodput over a run") {
  std::vector<request_outcome> reqs{done(true, 10, 5), done(true, 5000, 5), done(false, 10, 5),
                                    done(false, 10, 1500)};
  auto sut = evaluate_slo(reqs, 2.0, {});
  CHECK(sut.met == 2);
  CHECK(sut.met_interactive == 1);
  CHECK(sut.met_batch == 1);
  CHECK(sut.attainment == doctest::Approx(0.5));
  CHECK(sut.goodput_req_s == doctest::Approx(1.0));
  CHECK(std::isnan(evaluate_slo({}, 2.0, {}).attainment));
  CHECK(std::isnan(evaluate_slo(reqs, 0, {}).goodput_req_s));
}

TEST_CASE("bench slo: bounds parse as TTFT_MS,TPOT_MS with positive numbers") {
  auto b = parse_slo_bound("800,50.5");
  REQUIRE(b.has_value());
  CHECK(*b == slo_bound{800, 50.5});
  for (auto bad : {"", "800", "800,", ",50", "0,50", "800,-1", "800,x", "800,50,1", "nan,5"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_slo_bound(bad).has_value());
  }
}
