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
  r.modeled_step_busy_ms = 8000; // simulated: the steps ran as modeled, nothing lengthened
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
                    actors::scheduler_mode::free_transfer})
    sut.modes.push_back(summarize(fake_run(mode, mode == actors::scheduler_mode::fcfs ? 10 : 1)));
  sut.ratios = standard_ratios(sut.modes);
  sut.targets = comparison_targets(sut.modes, true);
  auto json = to_json(sut);
  for (auto key : {"command_line", "profile", "sim", "time_scale", "workload", "modes", "ratios",
                   "targets", "fcfs", "overlap", "free-transfer", "overlap_vs_free_transfer", "overlap_vs_fcfs",
                   "fcfs_vs_free_transfer"})
    CHECK_MESSAGE(has_key(json, key), std::string{key});
  for (auto key : {"throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "ttft_p99_interactive_ms",
                   "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms", "npu_busy", "transfer_hidden",
                   "preemptions", "swaps", "recomputes", "completed", "failed",
                   "peak_store_bytes", "transfer_s", "request_s", "goodput_req_s",
                   "slo_attainment", "saturation_tok_s"}) {
    CAPTURE(key);
    std::size_t count = 0;
    for (auto at = json.find("\"" + std::string{key} + "\": "); at != std::string::npos;
         at = json.find("\"" + std::string{key} + "\": ", at + 1))
      ++count;
    CHECK(count == 3); // once per mode
  }
  CHECK(json.find("\"overlap_goodput_vs_best_other\"") != std::string::npos);
}

TEST_CASE("bench report: targets pass and fail on their thresholds and missing modes are not judged") {
  using actors::scheduler_mode;
  auto clean = [](scheduler_mode mode, double ttft_scale) {
    auto r = fake_run(mode, ttft_scale);
    r.requests[9].reason = actors::end_reason::length; // nothing failed
    return summarize(r);
  };
  std::vector<mode_summary> modes{clean(scheduler_mode::prio_fcfs, 10),
                                  clean(scheduler_mode::sync, 1),
                                  clean(scheduler_mode::overlap, 1),
                                  clean(scheduler_mode::free_transfer, 1)};
  auto sut = comparison_targets(modes, true);
  REQUIRE(sut.size() == 3);
  CHECK(sut[0].id == "no_failed_requests");
  CHECK(sut[1].id == "overlap_interactive_ttft_p99_vs_prio_fcfs");
  CHECK(sut[2].id == "overlap_goodput_vs_best_other");
  for (auto& t : sut) {
    CAPTURE(t.id);
    REQUIRE(t.pass.has_value());
    CHECK(*t.pass); // equal goodput; interactive TTFT 10x lower than prio-fcfs
  }
  modes[2] = clean(scheduler_mode::overlap, 6);
  sut = comparison_targets(modes, true);
  CHECK_FALSE(*sut[1].pass); // only 1.7x lower than prio-fcfs
  CHECK(*sut[2].pass);
  auto partial = comparison_targets({modes[2]}, true);
  REQUIRE(partial.size() == 3);
  CHECK(partial[0].pass.has_value()); // nothing failed in the mode that ran
  CHECK_FALSE(partial[1].pass.has_value());
  CHECK_FALSE(partial[2].pass.has_value());
  auto none = comparison_targets(modes, false);
  CHECK(none.back().id == "no_overlap_goodput_vs_sync");
  CHECK(*none.back().pass);
}

TEST_CASE("bench report: one failed request fails every target of the comparison") {
  using actors::scheduler_mode;
  std::vector<mode_summary> modes{summarize(fake_run(scheduler_mode::prio_fcfs, 10)),
                                  summarize(fake_run(scheduler_mode::sync, 1)),
                                  summarize(fake_run(scheduler_mode::overlap, 1))};
  for (auto& m : modes)
    m.failed = 0;
  modes[0].failed = 1; // prio-fcfs lost one request
  for (bool overlaps : {true, false}) {
    CAPTURE(overlaps);
    auto sut = comparison_targets(modes, overlaps);
    for (auto& t : sut) {
      CAPTURE(t.id);
      REQUIRE(t.pass.has_value());
      CHECK_FALSE(*t.pass);
    }
  }
  modes[0].failed = 0;
  modes[1].timed_out = true;
  CHECK_FALSE(*comparison_targets(modes, true)[1].pass);
}

TEST_CASE("bench report: goodput counts only requests within their class's SLO") {
  auto r = fake_run(actors::scheduler_mode::overlap, 10); // TTFT 10..100, TPOT 5, one failed
  slo_set slo;
  slo.interactive = {15, 10}; // interactive requests 0 and 1: TTFT 10 and 20
  slo.batch = {60, 10};       // batch: TTFT 30..100 for requests 2..9, 9 failed
  auto sut = summarize(r, slo);
  CHECK(sut.slo_met_interactive == 1);
  CHECK(sut.slo_met_batch == 4); // 30, 40, 50, 60
  CHECK(sut.slo_attainment == doctest::Approx(0.5));
  CHECK(sut.goodput_req_s == doctest::Approx(0.5)); // 5 over 10 simulated s
  slo.batch.tpot_ms = 4; // TPOT 5 breaks every batch request
  CHECK(summarize(r, slo).slo_met_batch == 0);
}

TEST_CASE("bench report: the JSON document parses and keeps its documented key order") {
  bench_report sut;
  sut.ctx.command_line = "kvlane-bench --trace \"odd\nname\".csv";
  sut.ctx.cfg.models.push_back({});
  sut.ctx.model = sut.ctx.cfg.models[0].name;
  sut.modes.push_back(summarize(fake_run(actors::scheduler_mode::overlap, 1)));
  sut.ratios = standard_ratios(sut.modes); // no free-transfer: ratios of nothing
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
  CHECK(doc["targets"][0]["pass"] == false); // fake_run fails one request
  CHECK(doc["targets"][1]["pass"].is_null()); // prio-fcfs did not run
  CHECK(doc["modes"]["overlap"]["ttft_p50_ms"].is_number());
}

TEST_CASE("bench report: the JSON states the SLOs and carries each device's modes and targets") {
  bench_report sut;
  sut.ctx.cfg.models.push_back({});
  sut.ctx.model = sut.ctx.cfg.models[0].name;
  sut.ctx.slo.interactive = {800, 80};
  sut.modes.push_back(summarize(fake_run(actors::scheduler_mode::overlap, 1)));
  for (auto d : {backends::transfer_overlap::none, backends::transfer_overlap::full}) {
    device_run dr;
    dr.overlap = d;
    dr.assumption = d == backends::transfer_overlap::full;
    dr.modes = {summarize(fake_run(actors::scheduler_mode::sync, 1)),
                summarize(fake_run(actors::scheduler_mode::overlap, 1))};
    dr.targets = comparison_targets(dr.modes, d != backends::transfer_overlap::none);
    sut.devices.push_back(std::move(dr));
  }
  auto doc = nlohmann::json::parse(to_json(sut));
  CHECK(doc["workload"]["slo"]["interactive"]["ttft_ms"] == 800);
  CHECK(doc["workload"]["slo"]["interactive"]["tpot_ms"] == 80);
  CHECK(doc["workload"]["slo"]["batch"]["ttft_ms"] == 60000);
  CHECK(doc["modes"]["overlap"]["goodput_req_s"].is_number());
  REQUIRE(doc["devices"].contains("none"));
  REQUIRE(doc["devices"].contains("full"));
  CHECK_FALSE(doc["devices"].contains("shared"));
  CHECK(doc["devices"]["full"]["assumption"] == true);
  CHECK(doc["devices"]["none"]["assumption"] == false);
  CHECK(doc["devices"]["none"]["modes"]["sync"]["slo_attainment"].is_number());
  CHECK(doc["devices"]["none"]["targets"].back()["id"] == "no_overlap_goodput_vs_sync");
  CHECK(doc["devices"]["full"]["targets"].back()["id"] == "overlap_goodput_vs_best_other");
}
