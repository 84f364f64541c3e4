#include "tools/bench/report.hpp"
#include "tools/bench/report_json.hpp"
#include "tools/bench/reuse_variant.hpp"

#include "tests/support/fake_run.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

// Four requests; the last two had a prefix seen before. TTFTs 100, 200, 300, 400 x scale.
run_result fake_run(double ttft_scale, std::uint64_t reused) {
  auto r = test::four_request_run(ttft_scale);
  r.stats.reused_tokens = reused;
  r.stats.prefill_tokens = 400 - reused;
  r.stats.loads = 3;
  r.stats.dumps = 2;
  r.peak_store_bytes = 1 << 20;
  r.retained_evictions = 1;
  return r;
}

std::vector<trace_request> workload() {
  std::vector<trace_request> w(4);
  w[2].seen_prefix_tokens = 60;
  w[3].seen_prefix_tokens = 90;
  return w;
}

} // namespace

TEST_CASE("bench reuse report: a run is read against what an unlimited cache would reuse") {
  const auto w = workload();
  auto sut = summarize_reuse("store", fake_run(1, 120), w);
  CHECK(sut.policy == "store");
  CHECK(sut.prompt_tokens == 400);
  CHECK(sut.reused_tokens == 120);
  CHECK(sut.achievable_reused_tokens == 150);
  CHECK(sut.prefill_tokens == 280);
  CHECK(sut.reusable_requests == 2);
  CHECK(sut.throughput_tok_s == doctest::Approx(20.0)); // 200 tokens over 10 simulated s
  CHECK(sut.ttft_p50_ms == doctest::Approx(250));
  CHECK(sut.ttft_p50_reusable_ms == doctest::Approx(350)); // requests 2 and 3 only
  CHECK(sut.loads == 3);
  CHECK(sut.dumps == 2);
  CHECK(sut.retained_evictions == 1);
  CHECK(sut.completed == 4);
  CHECK(sut.failed == 0);
}

TEST_CASE("bench reuse report: targets pass and fail on their thresholds") {
  const auto w = workload();
  std::vector<reuse_summary> runs{summarize_reuse("off", fake_run(4, 0), w),
                                  summarize_reuse("slot", fake_run(2, 40), w),
                                  summarize_reuse("store", fake_run(1, 130), w)};
  auto sut = reuse_targets(runs);
  REQUIRE(sut.size() == 5);
  CHECK(sut[0].id == "no_failed_requests");
  CHECK(sut[0].pass == true);
  CHECK(sut[1].id == "store_reused_vs_achievable");
  CHECK(sut[1].value == doctest::Approx(130.0 / 150.0));
  CHECK(sut[1].pass == true);
  CHECK(sut[2].id == "store_reused_vs_slot");
  CHECK(sut[2].value == doctest::Approx(130.0 / 40.0));
  CHECK(sut[2].pass == true);
  CHECK(sut[3].id == "store_reusable_ttft_p50_vs_off");
  CHECK(sut[3].value == doctest::Approx(0.25));
  CHECK(sut[3].pass == true);
  CHECK(sut[4].id == "store_throughput_vs_off");
  CHECK(sut[4].pass == true);

  runs[2] = summarize_reuse("store", fake_run(2, 100), w); // 0.67 of achievable, TTFT 1/2
  sut = reuse_targets(runs);
  CHECK(sut[1].pass == false);
  CHECK(sut[2].pass == true);
  CHECK(sut[3].pass == false);

  // Without slot, its target is not judged; a failed request fails the rest.
  runs.erase(runs.begin() + 1);
  auto failing = fake_run(1, 130);
  failing.requests[0].reason = actors::end_reason::error;
  runs[1] = summarize_reuse("store", failing, w);
  sut = reuse_targets(runs);
  CHECK(sut[0].pass == false);
  CHECK_FALSE(sut[2].pass.has_value());
  CHECK(sut[1].pass == false);
}

TEST_CASE("bench reuse report: the JSON has a reuse object keyed by policy with the documented fields") {
  bench_report sut;
  sut.ctx.cfg.models.push_back({});
  sut.ctx.model = sut.ctx.cfg.models[0].name;
  const auto w = workload();
  sut.reuse = {summarize_reuse("off", fake_run(4, 0), w),
               summarize_reuse("store", fake_run(1, 120), w)};
  sut.targets = reuse_targets(sut.reuse);
  const auto doc = nlohmann::ordered_json::parse(to_json(sut));
  REQUIRE(doc.contains("reuse"));
  std::vector<std::string> policies;
  for (auto& [key, value] : doc["reuse"].items())
    policies.push_back(key);
  CHECK(policies == std::vector<std::string>{"off", "store"});
  std::vector<std::string> fields;
  for (auto& [key, value] : doc["reuse"]["store"].items())
    fields.push_back(key);
  CHECK(fields == std::vector<std::string>{
                    "throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "ttft_p50_reusable_ms",
                    "ttft_p99_reusable_ms", "prompt_tokens", "reused_tokens",
                    "achievable_reused_tokens", "prefill_tokens", "loads", "dumps",
                    "peak_store_bytes", "retained_evictions", "held_turns", "held_ms_mean",
                    "completed", "failed"});
  CHECK(doc["reuse"]["store"]["reused_tokens"] == 120);
  CHECK(doc["reuse"]["store"]["achievable_reused_tokens"] == 150);
}

TEST_CASE("bench reuse variant: policies by name, the store with either eviction value") {
  auto sut = parse_reuse_list("off,slot,store,store-recency,slot");
  REQUIRE(sut.has_value());
  REQUIRE(sut->size() == 4);
  CHECK((*sut)[0].mode == actors::reuse_mode::off);
  CHECK((*sut)[1].mode == actors::reuse_mode::slot);
  CHECK((*sut)[2].mode == actors::reuse_mode::store);
  CHECK((*sut)[2].eviction == ipc::eviction_value::cost);
  CHECK((*sut)[3].mode == actors::reuse_mode::store);
  CHECK((*sut)[3].eviction == ipc::eviction_value::recency);
  auto bad = parse_reuse_list("store,lru");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().find("'lru'") != std::string::npos);
}
