#include "tools/bench/bench_profile.hpp"
#include "tools/bench/conversation_workload.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/report_json.hpp"
#include "tools/bench/store_split.hpp"

#include "tests/support/fake_run.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

trace_request at(double t, std::uint32_t conversation) {
  trace_request r;
  r.arrival_s = t;
  r.conversation = conversation;
  return r;
}

} // namespace

TEST_CASE("bench store split: variants by name, duplicates dropped, unknown ones named") {
  auto sut = parse_store_split_list("shared,static,shared");
  REQUIRE(sut.has_value());
  CHECK(*sut == std::vector<store_split>{store_split::shared, store_split::static_halves});
  CHECK(to_string(store_split::shared) == "shared");
  CHECK(to_string(store_split::static_halves) == "static");
  auto bad = parse_store_split_list("shared,half");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().find("'half'") != std::string::npos);
  CHECK_FALSE(parse_store_split_list("").has_value());
}

TEST_CASE("bench store split: a conversation goes whole to the model of its first request's window") {
  // Windows of 100 s: [0,100) model 0, [100,200) model 1, [200,300) model 0, ...
  const std::vector<trace_request> requests{
    at(0, 0),   // conversation 0 starts in window 0
    at(50, 1),  // conversation 1 starts in window 0
    at(120, 0), // conversation 0 again, in window 1: stays on model 0
    at(150, 2), // conversation 2 starts in window 1
    at(199.9, 3),
    at(200, 4), // window 2: model 0 again
    at(260, 2), // conversation 2 in window 2: stays on model 1
    at(399, 5), // window 3
  };
  const auto sut = assign_in_bursts(requests, 100, 2);
  CHECK(sut == std::vector<std::uint32_t>{0, 0, 0, 1, 1, 0, 1, 1});
  // Deterministic: the same requests give the same models.
  CHECK(assign_in_bursts(requests, 100, 2) == sut);
  // One model, or no window: everything on model 0.
  CHECK(assign_in_bursts(requests, 100, 1) == std::vector<std::uint32_t>(requests.size(), 0));
  CHECK(assign_in_bursts(requests, 0, 2) == std::vector<std::uint32_t>(requests.size(), 0));
  // Three models take turns in order.
  CHECK(assign_in_bursts(requests, 100, 3) == std::vector<std::uint32_t>{0, 0, 0, 1, 1, 2, 1, 0});
}

TEST_CASE("bench store split: bursts on a sampled trace alternate the models over its windows") {
  // 40 conversations of three turns, one starting every 30 s, turns 10 s apart.
  std::vector<trace_request> requests;
  for (std::uint32_t c = 0; c < 40; ++c)
    for (int k = 0; k < 3; ++k)
      requests.push_back(at(c * 30.0 + k * 10.0, c));
  std::stable_sort(requests.begin(), requests.end(),
                   [](auto& a, auto& b) { return a.arrival_s < b.arrival_s; });
  const auto sut = assign_in_bursts(requests, 300, 2);
  std::array<std::size_t, 2> per_model{};
  for (std::size_t i = 0; i < requests.size(); ++i) {
    ++per_model[sut[i]];
    // Every turn on the model of its conversation's window.
    const auto first = requests[i].conversation * 30.0;
    CHECK(sut[i] == static_cast<std::uint32_t>(first / 300) % 2);
  }
  CHECK(per_model[0] == 60); // windows 0 and 2: conversations 0-9 and 20-29
  CHECK(per_model[1] == 60);
}

TEST_CASE("bench store split: static halves give each model floor = cap = half the store") {
  CHECK(static_share_bytes(32ull << 20, 2, 64 << 10) == 16ull << 20);
  // Rounded down to the allocation unit so the floors always fit the limit.
  CHECK(static_share_bytes((32ull << 20) + (64 << 10), 2, 64 << 10) == 16ull << 20);
  CHECK(static_share_bytes((1ull << 20) * 3, 2, 64 << 10) == (1ull << 20) + (512 << 10));
  CHECK(static_share_bytes(1000, 0, 64 << 10) == 0);

  auto profile = builtin_profile();
  REQUIRE(profile.has_value());
  auto sut = split_config(*profile, store_split::static_halves);
  REQUIRE(sut.has_value());
  REQUIRE(sut->models.size() == 2);
  CHECK(sut->models[0].name == "llama-3.2-1b-a");
  CHECK(sut->models[1].name == "llama-3.2-1b-b");
  std::uint64_t floors = 0;
  for (const auto& m : sut->models) {
    CHECK(m.store_floor_bytes == profile->store.max_bytes / 2);
    CHECK(m.store_cap_bytes == m.store_floor_bytes);
    CHECK(m.backend == profile->models.front().backend); // the same sim, same timing
    floors += m.store_floor_bytes;
  }
  CHECK(floors <= sut->store.max_bytes);
  CHECK(sut->store == profile->store);
  // Both on the profile's one simulated device: they take turns on it.
  CHECK(backends::device_of(sut->models[0].backend) == "sim");
  CHECK(backends::device_of(sut->models[1].backend) == "sim");
  CHECK(split_device(*sut) == "sim");
}

TEST_CASE("bench store split: the shared pool keeps the model's own floor and cap") {
  auto profile = builtin_profile();
  REQUIRE(profile.has_value());
  profile->models.front().store_cap_bytes = 20ull << 20;
  auto sut = split_config(*profile, store_split::shared);
  REQUIRE(sut.has_value());
  REQUIRE(sut->models.size() == 2);
  for (const auto& m : sut->models) {
    CHECK(m.store_floor_bytes == 0);
    CHECK(m.store_cap_bytes == 20ull << 20);
  }
  profile->models.front().name = std::string(63, 'm');
  CHECK(split_config(*profile, store_split::shared).error().find("too long") != std::string::npos);
  profile->models.clear();
  CHECK_FALSE(split_config(*profile, store_split::shared).has_value());
}

TEST_CASE("bench store split: achievable reuse is counted within each model") {
  // Two conversations of the same user sharing a prefix: on one model the
  // second reuses the first's prefix; split between models it cannot.
  auto prompt = std::make_shared<std::vector<backends::token_id>>(200, backends::token_id{'x'});
  std::vector<trace_request> requests(2);
  for (auto& r : requests) {
    r.prompt = prompt;
    r.prompt_tokens = 200;
    r.owner = 1;
  }
  CHECK(achievable_reuse(requests, 64) == std::vector<std::uint32_t>{0, 199});
  requests[1].model = 1;
  CHECK(achievable_reuse(requests, 64) == std::vector<std::uint32_t>{0, 0});
}

namespace {

// A split run: requests 0 and 1 on model 0, 2 and 3 on model 1; TTFT 100 x (i + 1).
run_result fake_split_run(std::uint64_t reused_a, std::uint64_t reused_b) {
  auto r = test::four_request_run();
  model_run a{"m-a", {}, 3 << 20};
  a.stats.reused_tokens = reused_a;
  a.stats.loads = 2;
  a.retained_evictions = 1;
  model_run b{"m-b", {}, 5 << 20};
  b.stats.reused_tokens = reused_b;
  b.stats.dumps = 4;
  b.retained_evictions = 3;
  r.models = {a, b};
  r.peak_store_bytes = 7 << 20;
  r.retained_evictions = 4;
  return r;
}

std::vector<trace_request> split_workload() {
  std::vector<trace_request> w(4);
  for (std::uint32_t i = 0; i < 4; ++i) {
    w[i].model = i / 2;
    w[i].conversation = i;
    w[i].prompt_tokens = 100;
  }
  w[1].seen_prefix_tokens = 80;
  w[3].seen_prefix_tokens = 60;
  return w;
}

} // namespace

TEST_CASE("bench store split: a run is read per model and for both together") {
  const auto w = split_workload();
  auto cfg = split_config(*builtin_profile(), store_split::static_halves);
  REQUIRE(cfg.has_value());
  cfg->models[0].name = "m-a";
  cfg->models[1].name = "m-b";
  const auto sut = summarize_split(store_split::static_halves, fake_split_run(80, 30), w, *cfg, {});
  REQUIRE(sut.models.size() == 2);
  const auto& a = sut.models[0];
  const auto& b = sut.models[1];
  CHECK(a.figures.policy == "m-a");
  CHECK(a.requests == 2);
  CHECK(a.conversations == 2);
  CHECK(a.figures.reused_tokens == 80);
  CHECK(a.figures.achievable_reused_tokens == 80);
  CHECK(a.figures.ttft_p50_ms == doctest::Approx(150));         // requests 0 and 1
  CHECK(a.figures.ttft_p50_reusable_ms == doctest::Approx(200)); // request 1 only
  CHECK(a.figures.peak_store_bytes == 3u << 20);
  CHECK(a.figures.throughput_tok_s == doctest::Approx(10.0)); // 100 tokens over 10 s
  CHECK(a.floor_bytes == cfg->store.max_bytes / 2);
  CHECK(a.cap_bytes == cfg->store.max_bytes / 2);
  CHECK(a.figures.retained_evictions == 1);
  CHECK(b.figures.ttft_p50_reusable_ms == doctest::Approx(400));
  CHECK(b.figures.dumps == 4);
  CHECK(sut.total.reused_tokens == 110);
  CHECK(sut.total.achievable_reused_tokens == 140);
  CHECK(sut.total.loads == 2);
  CHECK(sut.total.dumps == 4);
  CHECK(sut.total.peak_store_bytes == 7u << 20); // the store's own peak, not a sum
  CHECK(sut.total.ttft_p50_reusable_ms == doctest::Approx(300));
  CHECK(sut.total.completed == 4);
  CHECK(b.figures.retained_evictions == 3);
  CHECK(sut.total.retained_evictions == 4); // the store's count over both models
}

TEST_CASE("bench store split: targets compare shared against static on both models") {
  const auto w = split_workload();
  auto cfg = split_config(*builtin_profile(), store_split::shared);
  REQUIRE(cfg.has_value());
  const auto shared = summarize_split(store_split::shared, fake_split_run(90, 40), w, *cfg, {});
  const auto fixed = summarize_split(store_split::static_halves, fake_split_run(80, 30), w, *cfg, {});
  const auto q = shared_vs_static(shared, fixed);
  CHECK(q.reused_tokens == doctest::Approx(130.0 / 110.0));
  CHECK(q.ttft_p50_reusable == doctest::Approx(1.0));

  auto sut = split_targets({shared, fixed});
  REQUIRE(sut.size() == 3);
  CHECK(sut[0].id == "no_failed_requests");
  CHECK(sut[0].pass == true);
  CHECK(sut[1].id == "shared_reused_vs_static");
  CHECK(sut[1].pass == true);
  CHECK(sut[2].id == "shared_reusable_ttft_p50_vs_static");
  CHECK(sut[2].pass == true); // equal TTFT passes (<=)

  // Static reusing more fails the reuse target.
  const auto worse = summarize_split(store_split::shared, fake_split_run(50, 30), w, *cfg, {});
  CHECK(split_targets({worse, fixed})[1].pass == false);
  // Only one split ran: the comparisons are not evaluated.
  auto alone = split_targets({shared});
  CHECK(alone[1].pass == std::nullopt);
  // A failed request fails every target.
  auto failed_run = fake_split_run(90, 40);
  failed_run.requests[0].reason = actors::end_reason::error;
  const auto failing = summarize_split(store_split::shared, failed_run, w, *cfg, {});
  for (auto& t : split_targets({failing, fixed}))
    CHECK(t.pass == false);
}

TEST_CASE("bench store split: the JSON has a store_split object per split with per-model figures") {
  const auto w = split_workload();
  auto cfg = split_config(*builtin_profile(), store_split::shared);
  REQUIRE(cfg.has_value());
  bench_report r;
  r.ctx.cfg = *cfg;
  r.ctx.burst_s = 300;
  r.ctx.split_policy = "store";
  r.splits = {summarize_split(store_split::shared, fake_split_run(90, 40), w, *cfg, {}),
              summarize_split(store_split::static_halves, fake_split_run(80, 30), w, *cfg, {})};
  r.targets = split_targets(r.splits);
  auto sut = nlohmann::json::parse(to_json(r));
  const auto& split = sut.at("store_split");
  CHECK(split.at("burst_s") == 300);
  CHECK(split.at("policy") == "store");
  for (auto name : {"shared", "static"}) {
    CAPTURE(name);
    const auto& s = split.at(name);
    for (auto model : {"m-a", "m-b"})
      for (auto key : {"throughput_tok_s", "ttft_p50_reusable_ms", "reused_tokens",
                       "achievable_reused_tokens", "loads", "dumps", "peak_store_bytes",
                       "retained_evictions", "store_floor_bytes", "store_cap_bytes", "completed",
                       "failed"})
        CHECK_MESSAGE(s.at("models").at(model).contains(key), model, " ", key);
    CHECK(s.at("both").contains("retained_evictions"));
  }
  CHECK(split.at("shared").at("both").at("reused_tokens") == 130);
  CHECK(split.at("shared_vs_static").at("reused_tokens").get<double>()
        == doctest::Approx(130.0 / 110.0).epsilon(1e-3));
  const auto text = format_report(r);
  CHECK(text.find("shared m-a") != std::string::npos);
  CHECK(text.find("static both") != std::string::npos);
  CHECK(text.find("shared / static") != std::string::npos);
}

TEST_CASE("bench store split: a window far smaller than the arrivals still assigns every request") {
  const std::vector<trace_request> requests{at(0, 0), at(1e6, 1), at(2e6, 2)};
  const auto sut = assign_in_bursts(requests, 1e-300, 2);
  REQUIRE(sut.size() == 3);
  for (auto m : sut)
    CHECK(m < 2);
  CHECK(sut[0] == 0);
}
