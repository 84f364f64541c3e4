// The race's side-by-side figures, its targets and its JSON.
#include "tools/bench/race_report.hpp"
#include "tools/bench/race_summary.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

/// A completed request: TTFT and end in wall ms, tokens generated, what the server reported.
void completed(http_run_result& run, double ttft_ms, double e2e_ms, std::uint64_t tokens,
               bool interactive = false, bool reusable = false, std::uint64_t prefilled = 100,
               std::uint64_t reused = 0) {
  request_outcome o;
  o.index = static_cast<std::uint32_t>(run.requests.size());
  o.interactive = interactive;
  o.submitted = o.ended = true;
  o.reason = actors::end_reason::length;
  o.ttft_ms = ttft_ms;
  o.e2e_ms = e2e_ms;
  o.generated = static_cast<std::uint32_t>(tokens);
  run.requests.push_back(o);
  http_figures h;
  h.status = 200;
  h.reusable = reusable;
  h.output_tokens = tokens;
  h.prefilled_tokens = prefilled;
  h.reused_tokens = reused;
  run.http.push_back(h);
}

void failed(http_run_result& run, int status, std::string message, bool interactive = false) {
  request_outcome o;
  o.submitted = o.ended = true;
  o.interactive = interactive;
  o.reason = actors::end_reason::error;
  o.error = std::move(message);
  run.requests.push_back(o);
  http_figures h;
  h.status = status;
  h.error = o.error;
  run.http.push_back(h);
}

constexpr std::string_view content_only =
  "The model produced output that does not match the expected Content-only format";

} // namespace

TEST_CASE("bench_http: a side's figures count completed requests and group the failures") {
  http_run_result run;
  run.wall_s = 10;
  completed(run, 100, 1100, 51, /*interactive*/ true, /*reusable*/ false, 200, 0);
  completed(run, 300, 1300, 51, false, /*reusable*/ true, 40, 160);
  completed(run, 200, 2200, 101, true, true, 60, 140);
  failed(run, 500, std::string{content_only});
  failed(run, 500, std::string{content_only}, true);
  failed(run, 0, "timed out waiting for the response");

  const auto sut = summarize_side(run);
  CHECK(sut.requests == 6);
  CHECK(sut.completed == 3);
  CHECK(sut.failed == 3);
  CHECK(sut.interactive == 3);
  CHECK(sut.reusable == 2);
  CHECK(sut.output_tokens == 203);
  CHECK(sut.output_tok_s == doctest::Approx(20.3));
  CHECK(sut.ttft_p50_ms == doctest::Approx(200));
  CHECK(sut.ttft_p99_ms == doctest::Approx(298)); // linear between 200 and 300
  CHECK(sut.ttft_p50_reusable_ms == doctest::Approx(250));
  CHECK(sut.ttft_p99_interactive_ms == doctest::Approx(199));
  CHECK(sut.prefill_tokens == 300);
  CHECK(sut.reused_tokens == 300);
  // (tokens - 1) / (e2e - ttft): 50/1 s, 50/1 s, 100/2 s.
  CHECK(sut.decode_tok_s == doctest::Approx(50));
  // Median of prefilled / e2e: 200/1.1 s, 40/1.3 s, 60/2.2 s.
  CHECK(sut.prefill_tok_s == doctest::Approx(40 / 1.3));
  REQUIRE(sut.failures.size() == 2);
  CHECK(sut.failures[0].status == 500);
  CHECK(sut.failures[0].count == 2);
  CHECK(sut.failures[0].message == content_only);
  CHECK(sut.failures[1].status == 0);
  CHECK(sut.failures[1].count == 1);
}

TEST_CASE("bench_http: the peaks count requests in flight and conversations live between turns") {
  http_run_result run;
  run.wall_s = 10;
  // Conversation 7: turns at 0-1 s and (held 500 ms past its arrival at 2 s) 2.5-3 s;
  // conversation 8: one turn at 1.5-2 s; a request of no conversation at 0.5-4 s.
  auto add = [&](double arrival_s, double held_ms, double end_s, std::optional<std::uint32_t> c) {
    completed(run, 10, 100, 2);
    auto& o = run.requests.back();
    o.arrival_s = arrival_s;
    o.held_ms = held_ms;
    o.end_s = end_s;
    run.http.back().conversation = c;
  };
  add(0, 0, 1, 7);
  add(2, 500, 3, 7);
  add(1.5, 0, 2, 8);
  add(0.5, 0, 4, std::nullopt);
  const auto sut = summarize_side(run);
  CHECK(sut.peak_in_flight == 2);          // never three requests at once
  CHECK(sut.peak_live_conversations == 2); // 7 is live from 0 to 3 s, 8 within it
}

TEST_CASE("bench_http: rounds of a workload append as if run one after the other") {
  http_run_result sut;
  for (int round = 0; round < 2; ++round) {
    http_run_result part;
    part.wall_s = 5;
    completed(part, 100, 1000, 11, false, false, 40);
    part.requests.back().end_s = 1;
    append_run(sut, std::move(part));
  }
  REQUIRE(sut.requests.size() == 2);
  REQUIRE(sut.http.size() == 2);
  CHECK(sut.wall_s == 10);
  CHECK(sut.requests[1].index == 1);
  CHECK(sut.requests[1].arrival_s == 5); // after the first round's wall time
  CHECK(sut.requests[1].end_s == 6);
  const auto s = summarize_side(sut);
  CHECK(s.completed == 2);
  CHECK(s.peak_in_flight == 1);
  CHECK(s.output_tok_s == doctest::Approx(2.2));
}

TEST_CASE("bench_http: a side without samples has no figure rather than zero") {
  http_run_result run;
  run.wall_s = 3;
  failed(run, 500, "boom");
  const auto sut = summarize_side(run);
  CHECK(sut.completed == 0);
  CHECK(std::isnan(sut.output_tok_s));
  CHECK(std::isnan(sut.ttft_p50_ms));
  CHECK(std::isnan(sut.ttft_p50_reusable_ms));
  CHECK(std::isnan(sut.decode_tok_s));
  CHECK(std::isnan(sut.prefill_tok_s));
}

TEST_CASE("bench_http: targets are kvlane over llama-server against their bounds, both ways") {
  side_summary kv, ll;
  kv.decode_tok_s = 40;
  ll.decode_tok_s = 41; // 0.976 >= 0.95: met
  kv.prefill_tok_s = 300;
  ll.prefill_tok_s = 400; // 0.75: missed
  kv.output_tok_s = 50;
  ll.output_tok_s = 45;
  kv.ttft_p50_reusable_ms = 100;
  ll.ttft_p50_reusable_ms = 400; // 0.25 <= 0.5: met
  kv.ttft_p99_interactive_ms = 900;
  ll.ttft_p99_interactive_ms = 1000; // 0.9 > 0.5: missed
  const std::vector<race_sides> sides{{"decode", kv, ll},
                                      {"prefill", kv, ll},
                                      {"azure", kv, ll},
                                      {"mooncake", kv, ll}};
  const auto sut = race_targets(sides);
  REQUIRE(sut.size() == 6);
  auto find = [&](std::string_view w, race_metric m) {
    for (const auto& t : sut)
      if (t.workload == w && t.metric == m)
        return t;
    FAIL("no target " << w << " " << to_string(m));
    return race_target{};
  };
  auto decode = find("decode", race_metric::decode_tok_s);
  CHECK(decode.ratio == doctest::Approx(40.0 / 41));
  CHECK(decode.met);
  auto prefill = find("prefill", race_metric::prefill_tok_s);
  CHECK(prefill.ratio == doctest::Approx(0.75));
  CHECK_FALSE(prefill.met);
  auto output = find("mooncake", race_metric::output_tok_s);
  CHECK(output.bound == 1.0);
  CHECK(output.met);
  auto reuse = find("mooncake", race_metric::ttft_p50_reusable_ms);
  CHECK_FALSE(reuse.at_least);
  CHECK(reuse.ratio == doctest::Approx(0.25));
  CHECK(reuse.met);
  auto interactive = find("azure", race_metric::ttft_p99_interactive_ms);
  CHECK(interactive.ratio == doctest::Approx(0.9));
  CHECK_FALSE(interactive.met);
}

TEST_CASE("bench_http: a target with a side missing or without a figure is not met") {
  side_summary kv;
  kv.decode_tok_s = 40;
  side_summary ll;
  ll.decode_tok_s = std::nan("");
  const auto one = race_targets({{"decode", kv, std::nullopt}});
  REQUIRE(one.size() == 1);
  CHECK(std::isnan(one[0].ratio));
  CHECK_FALSE(one[0].met);
  const auto nan_side = race_targets({{"decode", kv, ll}});
  CHECK_FALSE(nan_side[0].met);
  CHECK(race_targets({{"something-else", kv, kv}}).empty());
}

TEST_CASE("bench_http: the JSON has each workload's two sides with exactly the race's fields") {
  http_run_result run;
  run.wall_s = 2;
  completed(run, 100, 600, 11, true, true, 30, 70);
  failed(run, 500, std::string{content_only});
  race_report sut;
  sut.command = "kvlane-bench --race-llama --gguf m.gguf";
  sut.machine.cores = 2;
  sut.model.gguf = "/abs/m.gguf";
  sut.model.name = "bench";
  sut.model.params = 123456789;
  race_workload_result w;
  w.name = "mooncake";
  w.description = "conversations";
  w.kvlane = summarize_side(run);
  w.llama = summarize_side(run);
  sut.workloads.push_back(w);
  sut.targets = race_targets({{"mooncake", w.kvlane, w.llama}});

  const auto j = nlohmann::ordered_json::parse(race_report_json(sut)); // keys in written order
  CHECK(j["command"] == sut.command);
  CHECK(j["machine"]["cores"] == 2);
  CHECK(j["model"]["gguf"] == "/abs/m.gguf");
  CHECK(j["model"]["params"] == 123456789);
  REQUIRE(j["workloads"].contains("mooncake"));
  for (std::string side : {"kvlane", "llama-server"}) {
    CAPTURE(side);
    const auto& s = j["workloads"]["mooncake"][side];
    std::vector<std::string> keys;
    for (auto it = s.begin(); it != s.end(); ++it)
      keys.push_back(it.key());
    CHECK(keys == std::vector<std::string>{"output_tok_s", "ttft_p50_ms", "ttft_p99_ms",
                                           "ttft_p50_reusable_ms", "ttft_p99_interactive_ms",
                                           "prefill_tokens", "reused_tokens", "completed",
                                           "failed", "failures"});
    CHECK(s["completed"] == 1);
    CHECK(s["failed"] == 1);
    CHECK(s["reused_tokens"] == 70);
    CHECK(s["ttft_p50_reusable_ms"] == 100);
    REQUIRE(s["failures"].size() == 1);
    CHECK(s["failures"][0]["status"] == 500);
    CHECK(s["failures"][0]["message"] == content_only);
    CHECK(s["failures"][0]["count"] == 1);
  }
  REQUIRE(j["targets"].is_array());
  CHECK(j["targets"].size() == 3);
  CHECK(j["targets"][0]["ratio"] == 1);
}

TEST_CASE("bench_http: the printed report shows both sides, the ratio and the failure message") {
  http_run_result run;
  run.wall_s = 2;
  completed(run, 100, 600, 11, true, true);
  failed(run, 500, std::string{content_only});
  race_report sut;
  race_workload_result w;
  w.name = "azure";
  w.description = "60 requests";
  w.kvlane = summarize_side(run);
  w.llama = summarize_side(run);
  sut.workloads.push_back(w);
  sut.targets = race_targets({{"azure", w.kvlane, w.llama}});
  const auto text = format_race_report(sut);
  CHECK(text.find("== azure ==") != std::string::npos);
  CHECK(text.find("kvlane") != std::string::npos);
  CHECK(text.find("llama-server") != std::string::npos);
  CHECK(text.find("1.00x") != std::string::npos);
  CHECK(text.find("llama-server failed 1 x: HTTP 500: The model produced output") != std::string::npos);
  CHECK(text.find("MISS") != std::string::npos); // 1.00x is not <= 0.5x
}
