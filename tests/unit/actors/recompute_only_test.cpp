// A device without snapshots (caps.snapshots = false: the sim with snapshot = "none", as the
// qbruntime backend on an SDK without per-slot transfers) is preempted by recompute only.
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::scheduler_mode;
using test::engine_fixture;

namespace {

std::vector<actors::submit_request> greedy_workload(std::size_t n) {
  std::vector<actors::submit_request> out;
  for (std::size_t i = 0; i < n; ++i) {
    actors::submit_request r;
    r.model = "tiny";
    r.client = "c";
    r.priority = i % 3 == 0 ? actors::priority_class::interactive : actors::priority_class::batch;
    for (std::size_t k = 0; k < 20 + (i * 29) % 90; ++k)
      r.prompt_tokens.push_back(static_cast<backends::token_id>(97 + (i * 5 + k * 7) % 26));
    r.sampling.max_tokens = static_cast<std::uint32_t>(30 + (i * 11) % 30);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::vector<backends::token_id>> run_all(actors::engine& e,
                                                     const std::vector<actors::submit_request>& reqs) {
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (const auto& r : reqs) {
    auto s = e.submit(r);
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  std::vector<std::vector<backends::token_id>> out;
  for (auto& s : streams) {
    auto c = s->collect(60s);
    REQUIRE(c.has_value());
    REQUIRE(c->end.has_value());
    CHECK(c->end->reason == actors::end_reason::length);
    out.push_back(std::move(c->tokens));
  }
  return out;
}

} // namespace

TEST_CASE("scheduler: a backend without snapshots is preempted by recompute only, streams stay exact") {
  const auto reqs = greedy_workload(12);
  engine_fixture with_snapshots{test::small_config(scheduler_mode::overlap)};
  const auto want = run_all(*with_snapshots.engine, reqs);
  CHECK(with_snapshots.stats().swaps > 0); // the same workload does swap when it can

  for (auto mode : {scheduler_mode::sync, scheduler_mode::overlap}) {
    CAPTURE(actors::to_string(mode));
    auto cfg = test::small_config(mode);
    cfg.models.front().backend.sim.snapshots = false;
    engine_fixture sut{cfg};
    REQUIRE_FALSE(sut.sim().info().caps.snapshots);
    CHECK(run_all(*sut.engine, reqs) == want);
    const auto st = sut.stats();
    CHECK(st.preemptions > 0);
    CHECK(st.recomputes >= st.preemptions);
    CHECK(st.swaps == 0);
    CHECK(st.dumps == 0);
    CHECK(st.loads == 0);
    CHECK(sut.sim().counters().dumps == 0);
    sut.check_nothing_leaked();
  }
}
