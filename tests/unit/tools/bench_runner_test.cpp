// End to end: synthetic requests through the in-process engine in two modes.
#include "tools/bench/bench_runner.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/report_json.hpp"
#include "tools/bench/store_split.hpp"

#include "tests/support/bench_profile.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

using namespace kvlane;
using namespace kvlane::tools::bench;

TEST_CASE("bench runner: ten synthetic requests complete in two modes and report every field") {
  auto reqs = test::small_synthetic(10, 5);
  mark_interactive(reqs, 0.3, 5);

  run_options opts;
  opts.cfg = test::fast_bench_profile();
  opts.time_scale = opts.cfg.models.front().backend.sim.time_scale;
  opts.timeout = std::chrono::seconds(30);
  bench_report sut;
  for (auto mode : {actors::scheduler_mode::fcfs, actors::scheduler_mode::overlap}) {
    CAPTURE(actors::to_string(mode));
    auto r = run_mode(opts, mode, reqs);
    REQUIRE(r.has_value());
    CHECK_FALSE(r->timed_out);
    auto s = summarize(*r);
    CHECK(s.completed == 10);
    CHECK(s.failed == 0);
    std::uint64_t want = 0;
    for (auto& q : reqs)
      want += q.output_tokens;
    CHECK(s.output_tokens == want); // forced output lengths
    CHECK(s.throughput_tok_s > 0);
    CHECK(std::isfinite(s.ttft_p99_ms));
    CHECK(s.npu_busy > 0);
    CHECK(s.npu_busy <= 1.05);
    sut.modes.push_back(std::move(s));
  }
  sut.ctx.cfg = opts.cfg;
  sut.ctx.model = opts.cfg.models.front().name;
  sut.ratios = standard_ratios(sut.modes);
  sut.targets = comparison_targets(sut.modes, true);
  auto json = to_json(sut);
  for (auto key : {"\"modes\"", "\"fcfs\"", "\"overlap\"", "\"throughput_tok_s\"",
                   "\"ttft_p99_interactive_ms\"", "\"npu_busy\"", "\"transfer_hidden\"",
                   "\"completed\": 10", "\"failed\": 0", "\"overlap_vs_fcfs\""})
    CHECK_MESSAGE(json.find(key) != std::string::npos, key);
}

TEST_CASE("bench runner: synthetic prompts of different requests share no reusable prefix") {
  // [reuse] min_prefix_tokens defaults to 64; a shared run of even 16 tokens
  // between two requests' prompts would be a reuse the trace does not have.
  constexpr std::uint32_t requests = 400, length = 64;
  std::vector<std::vector<backends::token_id>> prompts;
  for (std::uint32_t i = 0; i < requests; ++i)
    prompts.push_back(synthetic_prompt(i, length));
  std::size_t longest = 0;
  for (std::uint32_t i = 0; i < requests; ++i)
    for (std::uint32_t j = i + 1; j < requests; ++j) {
      const auto m = std::mismatch(prompts[i].begin(), prompts[i].end(), prompts[j].begin());
      longest = std::max<std::size_t>(longest, m.first - prompts[i].begin());
    }
  CHECK(longest < 16);
  // The same index gives the same prompt, and a shorter one is its prefix.
  CHECK(synthetic_prompt(7, length) == prompts[7]);
  const auto shorter = synthetic_prompt(7, 10);
  CHECK(std::equal(shorter.begin(), shorter.end(), prompts[7].begin()));
}

TEST_CASE("bench runner: two models share the store and each request goes to the model it names") {
  auto reqs = test::small_synthetic(12, 7);
  std::uint64_t want[2] = {0, 0};
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].model = i < 4 ? 0 : 1; // 4 on the first model, 8 on the second
    want[reqs[i].model] += reqs[i].output_tokens;
  }
  auto cfg = split_config(test::fast_bench_profile(), store_split::static_halves);
  REQUIRE(cfg.has_value());
  run_options opts;
  opts.cfg = *cfg;
  opts.models = {cfg->models[0].name, cfg->models[1].name};
  opts.time_scale = cfg->models.front().backend.sim.time_scale;
  opts.timeout = std::chrono::seconds(30);
  auto sut = run_mode(opts, actors::scheduler_mode::overlap, reqs);
  REQUIRE(sut.has_value());
  CHECK_FALSE(sut->timed_out);
  REQUIRE(sut->models.size() == 2);
  for (std::uint32_t m = 0; m < 2; ++m) {
    CAPTURE(m);
    CHECK(sut->models[m].name == opts.models[m]);
    CHECK(sut->models[m].stats.finished == (m == 0 ? 4u : 8u));
    CHECK(sut->models[m].stats.tokens_generated == want[m]);
    CHECK(sut->models[m].peak_store_bytes <= cfg->models[m].store_cap_bytes);
  }
  CHECK(sut->store.models.size() == 2);
  CHECK(sut->stats.finished == 4); // the first model's, as for a single-model run

  reqs.back().model = 2; // no third model
  auto bad = run_mode(opts, actors::scheduler_mode::overlap, reqs);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().find("model index 2") != std::string::npos);
}

TEST_CASE("bench runner: a conversation's turn is sent only after its previous turn has ended") {
  auto reqs = test::small_synthetic(2, 3);
  reqs[0].arrival_s = 0;
  reqs[0].output_tokens = 40;
  reqs[1].arrival_s = 0.001; // long before turn 0 can end
  run_options opts;
  opts.cfg = test::fast_bench_profile();
  opts.time_scale = opts.cfg.models.front().backend.sim.time_scale;
  opts.timeout = std::chrono::seconds(30);
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    reqs[1].previous_turn = causal ? 0 : -1;
    auto r = run_mode(opts, actors::scheduler_mode::overlap, reqs);
    REQUIRE(r.has_value());
    REQUIRE(r->requests[0].completed());
    REQUIRE(r->requests[1].completed());
    CHECK(r->requests[0].held_ms == 0);
    if (causal) {
      // Sent at turn 0's end: it waited that long past its trace time, and
      // it ended after turn 0 did.
      CHECK(r->requests[1].held_ms > 0);
      CHECK(r->requests[1].held_ms >= r->requests[0].end_s * 1000 - reqs[1].arrival_s * 1000);
      CHECK(r->requests[1].end_s > r->requests[0].end_s);
    } else {
      CHECK(r->requests[1].held_ms == 0);
    }
  }
}
