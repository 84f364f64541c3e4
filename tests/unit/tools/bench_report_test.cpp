#include "tools/bench/report.hpp"
#include "tools/bench/report_json.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

run_result fake_run(actors::scheduler_mode mode, double ttft_scale) {
  run_result r;
  r.mode = mode;
  r.time_scale = 10;
  r.wall_ms = 1000; // 10 simulated seconds
  for (std::uint32_t i = 0; i < 10; ++i) {
    request_outcome o;
    o.index = i;
    o.interactive = i < 2;
    o.output_tokens = 20;
    o.submitted = o.ended = true;
    o.reason = actors::end_reason::length;
    o.generated = 20;
    o.ttft_ms = ttft_scale * (i + 1);
    o.tpot_ms = 5;
    o.e2e_ms = 100 + i;
    r.requests.push_back(o);
  }
  r.requests[9].reason = actors::end_reason::error;
  r.stats.slots = 4;
  r.stats.step_busy_ms = 800;
  r.stats.transfer_ms = 50;
  r.stats.transfer_hidden_ms = 40;
  r.stats.preemptions = 20;
  r.stats.swaps = 15;
  r.stats.recomputes = 5;
  return r;
}

bool has_key(const std::string& json, std::string_view key) {
  return json.find("\"" + std::string{key} + "\": ") != std::string::npos;
}

} // namespace

TEST_CASE("bench report: a summary reads every request the same way") {
  auto sut = summarize(fake_run(actors::scheduler_mode::overlap, 10));
  CHECK(sut.mode == "overlap");
  CHECK(sut.completed == 9);
  CHECK(sut.failed == 1);
  CHECK(sut.output_tokens == 200);
  CHECK(sut.makespan_s == doctest::Approx(10));
  CHECK(sut.throughput_tok_s == doctest::Approx(20));
  CHECK(sut.ttft_p50_ms == doctest::Approx(50)); // completed: 10..90
  CHECK(sut.ttft_p99_interactive_ms == doctest::Approx(19.9));
  CHECK(sut.npu_busy == doctest::Approx(0.8));
  CHECK(sut.transfer_s == doctest::Approx(0.5));
  CHECK(sut.transfer_hidden == doctest::Approx(0.8));
  CHECK(sut.preemptions_per_slot_s == doctest::Approx(0.5));
}

TEST_CASE("bench report: the JSON carries the documented field names for every mode") {
  bench_report sut;
  sut.ctx.command_line = "kvlane-bench --synthetic";
  sut.ctx.cfg.models.push_back({});
  sut.ctx.model = sut.ctx.cfg.models[0].name;
  for (auto mode : {actors::scheduler_mode::fcfs, actors::scheduler_mode::overlap,
                    actors::scheduler_mode::ideal})
    sut.modes.push_back(summarize(fake_run(mode, mode == actors::scheduler_mode::fcfs ? 10 : 1)));
  sut.ratios = standard_ratios(sut.modes);
  sut.targets = comparison_targets(sut.modes, true);
  auto json = to_json(sut);
  for (auto key : {"command_line", "profile", "sim", "time_scale", "workload", "modes", "ratios",
                   "targets", "fcfs", "overlap", "ideal", "overlap_vs_ideal", "overlap_vs_fcfs",
                   "fcfs_vs_ideal"})
    CHECK_MESSAGE(has_key(json, key), key);
  for (auto key : {"throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "ttft_p99_interactive_ms",
                   "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms", "npu_busy", "transfer_hidden",
                   "preemptions", "swaps", "recomputes", "completed", "failed",
                   "peak_store_bytes", "transfer_s", "request_s"}) {
    CAPTURE(key);
    std::size_t count = 0;
    for (auto at = json.find("\"" + std::string{key} + "\": "); at != std::string::npos;
         at = json.find("\"" + std::string{key} + "\": ", at + 1))
      ++count;
    CHECK(count == 3); // once per mode
  }
  CHECK(json.find("\"overlap_throughput_vs_ideal\"") != std::string::npos);
}

TEST_CASE("bench report: targets pass and fail on their thresholds and missing modes are not judged") {
  std::vector<mode_summary> modes{summarize(fake_run(actors::scheduler_mode::fcfs, 10)),
                                  summarize(fake_run(actors::scheduler_mode::overlap, 1)),
                                  summarize(fake_run(actors::scheduler_mode::ideal, 1))};
  auto sut = comparison_targets(modes, true);
  REQUIRE(sut.size() == 4);
  for (auto& t : sut) {
    CAPTURE(t.id);
    REQUIRE(t.pass.has_value());
    CHECK(*t.pass); // equal throughput; interactive TTFT 10x lower than fcfs
  }
  modes[1] = summarize(fake_run(actors::scheduler_mode::overlap, 3));
  sut = comparison_targets(modes, true);
  CHECK_FALSE(*sut[1].pass); // TTFT p99 3x ideal's
  CHECK_FALSE(*sut[3].pass); // only 3.3x lower than fcfs
  auto partial = comparison_targets({modes[1]}, true);
  for (auto& t : partial)
    CHECK_FALSE(t.pass.has_value());
  CHECK(comparison_targets(modes, false).front().id == "no_overlap_throughput_vs_sync");
}

TEST_CASE("bench report: the JSON document parses and keeps its documented key order") {
  bench_report sut;
  sut.ctx.command_line = "kvlane-bench --trace \"odd\nname\".csv";
  sut.ctx.cfg.models.push_back({});
  sut.ctx.model = sut.ctx.cfg.models[0].name;
  sut.modes.push_back(summarize(fake_run(actors::scheduler_mode::overlap, 1)));
  sut.ratios = standard_ratios(sut.modes); // no ideal: ratios of nothing
  sut.targets = comparison_targets(sut.modes, true); // not judged: pass is null
  auto doc = nlohmann::json::parse(to_json(sut));
  CHECK(doc["command_line"] == sut.ctx.command_line); // escaped and read back
  const auto ordered = nlohmann::ordered_json::parse(to_json(sut));
  std::vector<std::string> top;
  for (auto& [key, value] : ordered.items())
    top.push_back(key);
  CHECK(top == std::vector<std::string>{"tool", "version", "command_line", "path", "time_unit",
                                        "profile", "workload", "modes", "ratios", "targets"});
  REQUIRE_FALSE(doc["targets"].empty());
  CHECK(doc["targets"][0]["pass"].is_null());
  CHECK(doc["modes"]["overlap"]["ttft_p50_ms"].is_number());
}
