#include "tools/bench/workload.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace kvlane::tools::bench;

namespace {

// 11 requests, one per second, 100 prompt + 10 output tokens each.
std::vector<trace_request> evenly(std::size_t n = 11) {
  std::vector<trace_request> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({static_cast<double>(i), 100, 10});
  return out;
}

work_model simple_model() {
  work_model m;
  m.step_base_ms = 30;
  m.step_per_token_ms = 2;
  m.decode_batch = 5;
  m.max_step_tokens = 0;
  return m;
}

} // namespace

TEST_CASE("bench workload: work counts every token once and the step cost once per batch") {
  auto sut = evenly();
  // 11 * 110 tokens * 2 ms + 30 ms * (11 * 10 outputs / 5 per step)
  CHECK(work_ms(sut, simple_model()) == doctest::Approx(2420 + 660));
  auto m = simple_model();
  m.max_step_tokens = 100; // 12.1 steps for the tokens: fewer than the 22 decode steps
  CHECK(work_ms(sut, m) == doctest::Approx(3080));
  m.max_step_tokens = 20; // 1210 / 20 = 60.5 steps of 30 ms
  CHECK(work_ms(sut, m) == doctest::Approx(2420 + 1815));
  CHECK(capacity_req_s(sut, simple_model()) == doctest::Approx(11 * 1000.0 / 3080));
}

TEST_CASE("bench workload: arrivals scaled for a load offer exactly that load") {
  auto sut = evenly();
  auto m = simple_model();
  // rate 1/s, mean work 0.28 s: load 0.28
  REQUIRE(offered_load(sut, m).has_value());
  CHECK(*offered_load(sut, m) == doctest::Approx(0.28));
  for (double load : {0.5, 1.0, 1.25}) {
    auto reqs = sut;
    auto f = factor_for_load(reqs, m, load);
    REQUIRE(f.has_value());
    scale_arrivals(reqs, *f);
    CHECK(*offered_load(reqs, m) == doctest::Approx(load));
    CHECK(reqs.front().arrival_s == 0);
    CHECK(reqs.back().arrival_s == doctest::Approx(10 * 0.28 / load));
  }
}

TEST_CASE("bench workload: the load is undefined for one request or a single instant") {
  auto m = simple_model();
  CHECK_FALSE(offered_load(evenly(1), m).has_value());
  std::vector<trace_request> burst(5, trace_request{0, 10, 10});
  CHECK_FALSE(factor_for_load(burst, m, 1.0).has_value());
}

TEST_CASE("bench workload: the work model comes from the sim figures and the spare slots") {
  kvlane::daemon::config cfg;
  kvlane::daemon::model_section model;
  model.backend.sim.slots = 16;
  cfg.scheduler.spare_slots = 1;
  auto sut = work_model_for(cfg, model);
  CHECK(sut.step_base_ms == 31.0);
  CHECK(sut.step_per_token_ms == 1.7);
  CHECK(sut.decode_batch == 15);
  CHECK(sut.max_step_tokens == 512);
  cfg.scheduler.mode = kvlane::actors::scheduler_mode::fcfs;
  CHECK(work_model_for(cfg, model).decode_batch == 15); // independent of the mode run
}

TEST_CASE("bench workload: the interactive share is seeded and close to the asked fraction") {
  auto sut = evenly(2000);
  auto n = mark_interactive(sut, 0.2, 7);
  CHECK(n > 340);
  CHECK(n < 460);
  auto again = evenly(2000);
  CHECK(mark_interactive(again, 0.2, 7) == n);
  for (std::size_t i = 0; i < sut.size(); ++i)
    CHECK(sut[i].interactive == again[i].interactive);
  CHECK(mark_interactive(again, 0.0, 7) == 0);
  CHECK(mark_interactive(again, 1.0, 7) == 2000);
}

TEST_CASE("bench workload: synthetic arrivals are Poisson at the asked rate with the asked means") {
  for (auto dist : {length_dist::lognormal, length_dist::exponential}) {
    CAPTURE(to_string(dist));
    synthetic_options o;
    o.requests = 4000;
    o.rate_per_s = 2.0;
    o.prompt_mean = 300;
    o.output_mean = 50;
    o.dist = dist;
    auto sut = synthetic(o, 3);
    REQUIRE(sut.size() == 4000);
    CHECK(sut.front().arrival_s == 0);
    CHECK(sut.back().arrival_s / 3999 == doctest::Approx(0.5).epsilon(0.06));
    double p = 0, g = 0;
    for (auto& r : sut) {
      CHECK(r.prompt_tokens >= 1);
      CHECK(r.output_tokens >= 1);
      p += r.prompt_tokens;
      g += r.output_tokens;
    }
    CHECK(p / 4000 == doctest::Approx(300).epsilon(0.06));
    CHECK(g / 4000 == doctest::Approx(50).epsilon(0.06));
    auto again = synthetic(o, 3);
    CHECK(again.back().arrival_s == sut.back().arrival_s);
  }
}
