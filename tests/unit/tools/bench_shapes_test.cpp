// The grid of workload shapes (--shapes): parsing, each shape's options, the
// per-cell targets and their summary, the JSON and the chart, and a small grid
// run end to end through the in-process engine.
#include "tools/bench/bench_options.hpp"
#include "tools/bench/shape_report.hpp"
#include "tools/bench/shape_run.hpp"

#include "tests/support/bench_profile.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

expected<bench_options, std::string> parse(std::vector<std::string_view> args) {
  return parse_args(args);
}

bool mentions(const expected<bench_options, std::string>& r, std::string_view what) {
  return !r && r.error().find(what) != std::string::npos;
}

mode_summary mode(std::string name, double goodput, double ttft_p99_interactive_ms) {
  mode_summary m;
  m.mode = std::move(name);
  m.requests = m.completed = 10;
  m.goodput_req_s = goodput;
  m.ttft_p99_interactive_ms = ttft_p99_interactive_ms;
  return m;
}

/// Six modes: overlap at `overlap_goodput` and `overlap_ttft`, prio-fcfs's
/// interactive TTFT p99 at `prio_ttft`; fcfs has the best other goodput (0.5),
/// free-transfer a higher one that must not count.
std::vector<mode_summary> six_modes(double overlap_goodput, double overlap_ttft,
                                    double prio_ttft) {
  return {mode("fcfs", 0.5, 60000),        mode("prio-fcfs", 0.45, prio_ttft),
          mode("recompute", 0.4, 3000),    mode("sync", 0.42, 3000),
          mode("overlap", overlap_goodput, overlap_ttft), mode("free-transfer", 0.9, 1000)};
}

const target_check& target(const std::vector<target_check>& targets, std::string_view id) {
  for (auto& t : targets)
    if (t.id == id)
      return t;
  FAIL("no target " << id);
  return targets.front();
}

} // namespace

TEST_CASE("bench shapes: --shapes parses a list of shapes and refuses the flags the shapes fix") {
  auto sut = parse({"--shapes", "decode-heavy,conv,conv", "--sweep", "0.5,2", "--devices",
                    "none,full", "--requests", "40"});
  REQUIRE(sut.has_value());
  CHECK(sut->shapes == std::vector{workload_shape::decode_heavy, workload_shape::conv});
  CHECK(shape_loads(*sut) == std::vector{0.5, 2.0});
  auto one = parse({"--shapes", "mooncake", "--load", "1.5"});
  REQUIRE(one.has_value());
  CHECK(shape_loads(*one) == std::vector{1.5});
  CHECK(shape_loads(*parse({"--shapes", "conv"})) == std::vector{1.0});

  CHECK(mentions(parse({"--shapes", "conv,chat"}), "'chat'"));
  CHECK(mentions(parse({"--shapes", ""}), "unknown shape ''"));
  CHECK(mentions(parse({"--shapes", "conv", "--trace", "t.csv"}), "--trace and --synthetic"));
  CHECK(mentions(parse({"--shapes", "conv", "--synthetic"}), "--trace and --synthetic"));
  CHECK(mentions(parse({"--shapes", "conv", "--prompt-mean", "9"}), "--prompt-mean"));
  CHECK(mentions(parse({"--shapes", "mooncake", "--sample-conversations", "0.5"}),
                 "--sample-conversations"));
  CHECK(mentions(parse({"--shapes", "conv", "--reuse", "off"}), "--reuse"));
  CHECK(mentions(parse({"--shapes", "conv", "--sweep-quantum"}), "--sweep-quantum"));
  CHECK(mentions(parse({"--shapes", "conv", "--rate-scale", "2"}), "--rate-scale"));
  CHECK(mentions(parse({"--shapes", "conv", "--path", "both"}), "--path inproc or ipc"));
  CHECK(mentions(parse({"--shapes", "conv", "--requests", "0"}), "--requests"));
}

TEST_CASE("bench shapes: each shape's options build its trace or synthetic mix at the cell's load") {
  auto o = parse({"--shapes", "conv,mooncake,prefill-heavy,decode-heavy", "--azure-trace",
                  "a.csv", "--mooncake-trace", "m.jsonl", "--requests", "40", "--sweep",
                  "0.5,1.0", "--devices", "none,full", "--modes", "fcfs,overlap"});
  REQUIRE(o.has_value());

  auto conv = shape_options(*o, workload_shape::conv, 1.5);
  CHECK(conv.trace_path == o->race.azure_trace); // as --azure-trace gave it, made absolute
  CHECK_FALSE(conv.synthetic);
  CHECK(conv.requests == 40);
  CHECK(conv.load == 1.5);
  CHECK(conv.sweep_loads.empty());
  CHECK(conv.shapes.empty());
  CHECK(conv.devices == o->devices);
  CHECK(conv.modes == o->modes);

  auto moon = shape_options(*o, workload_shape::mooncake, 0.5);
  CHECK(moon.trace_path == o->race.mooncake_trace);
  CHECK(moon.sample_conversations == mooncake_shape_sample);
  CHECK(moon.input_scale == mooncake_shape_input_scale);
  CHECK(moon.requests == 0);        // every row is read and sampled,
  CHECK(moon.keep_requests == 40);  // then the first 40 of the sample kept

  auto prefill = shape_options(*o, workload_shape::prefill_heavy, 2.0);
  CHECK(prefill.synthetic);
  CHECK(prefill.trace_path.empty());
  CHECK(prefill.synth.prompt_mean == 2048);
  CHECK(prefill.synth.output_mean == 24);
  CHECK(prefill.requests == 40);
  auto decode = shape_options(*o, workload_shape::decode_heavy, 2.0);
  CHECK(decode.synth.prompt_mean == 256);
  CHECK(decode.synth.output_mean == 512);
}

TEST_CASE("bench shapes: overlap's goodput must reach 0.98x the best other mode, free-transfer excepted") {
  const slo_set slo;
  auto pass = shape_targets(six_modes(0.49, 3000, 3000), slo);
  const auto& g = target(pass, "shape_overlap_goodput_vs_best_other");
  CHECK(g.value == doctest::Approx(0.98));
  CHECK(g.pass == std::optional<bool>{true});
  CHECK(g.description.find("fcfs best: 0.500") != std::string::npos);

  auto fail = shape_targets(six_modes(0.48, 3000, 3000), slo);
  CHECK(target(fail, "shape_overlap_goodput_vs_best_other").pass == std::optional<bool>{false});

  // Nobody met an SLO: overlap is no worse than the best other.
  auto none = six_modes(0, 3000, 3000);
  for (auto& m : none)
    m.goodput_req_s = 0;
  CHECK(target(shape_targets(none, slo), "shape_overlap_goodput_vs_best_other").value == 1.0);

  // Without overlap, or with overlap alone, there is nothing to compare.
  CHECK_FALSE(target(shape_targets({mode("overlap", 0.3, 1000)}, slo),
                     "shape_overlap_goodput_vs_best_other")
                .pass.has_value());
}

TEST_CASE("bench shapes: the interactive TTFT target is evaluated only where prio-fcfs misses its SLO by more than 2x") {
  const slo_set slo; // interactive TTFT bound 2000 ms: prio-fcfs misses above 4000
  auto met = shape_targets(six_modes(0.5, 3900, 4000), slo);
  const auto& t = target(met, "shape_overlap_interactive_ttft_p99_vs_prio_fcfs");
  CHECK_FALSE(t.pass.has_value());
  CHECK(t.value == doctest::Approx(0.975)); // still reported
  CHECK(t.description.find("not evaluated") != std::string::npos);

  auto missed_pass = shape_targets(six_modes(0.5, 2000, 4001), slo);
  CHECK(target(missed_pass, "shape_overlap_interactive_ttft_p99_vs_prio_fcfs").pass
        == std::optional<bool>{true});
  auto missed_fail = shape_targets(six_modes(0.5, 2100, 4001), slo);
  CHECK(target(missed_fail, "shape_overlap_interactive_ttft_p99_vs_prio_fcfs").pass
        == std::optional<bool>{false});

  // A stricter SLO moves the line: 1000 ms -> prio-fcfs misses above 2000.
  slo_set strict;
  strict.interactive.ttft_ms = 1000;
  CHECK(target(shape_targets(six_modes(0.5, 3900, 4000), strict),
               "shape_overlap_interactive_ttft_p99_vs_prio_fcfs")
          .pass
        == std::optional<bool>{false});

  // No interactive request completed in prio-fcfs: not evaluated.
  auto no_interactive = six_modes(0.5, 2000, std::numeric_limits<double>::quiet_NaN());
  CHECK_FALSE(target(shape_targets(no_interactive, slo),
                     "shape_overlap_interactive_ttft_p99_vs_prio_fcfs")
                .pass.has_value());
}

TEST_CASE("bench shapes: a failed or timed-out request fails every evaluated target of its cell") {
  const slo_set slo;
  auto modes = six_modes(0.6, 1000, 9000);
  CHECK(target(shape_targets(modes, slo), "no_failed_requests").pass == std::optional<bool>{true});
  modes[0].failed = 2;
  modes[3].timed_out = true;
  auto sut = shape_targets(modes, slo);
  CHECK(target(sut, "no_failed_requests").value == 3);
  for (auto& t : sut) {
    CAPTURE(t.id);
    CHECK(t.pass == std::optional<bool>{false});
  }
}

TEST_CASE("bench shapes: the summary counts each target over the grid and names the worst cell") {
  const slo_set slo;
  std::vector<shape_cell> cells(3);
  cells[0].shape = workload_shape::conv;
  cells[0].modes = six_modes(0.45, 3000, 3000); // goodput 0.9: fail; TTFT not evaluated
  cells[1].shape = workload_shape::decode_heavy;
  cells[1].load = 2.0;
  cells[1].device = backends::transfer_overlap::shared;
  cells[1].modes = six_modes(0.40, 6000, 8000); // goodput 0.8: the worst; TTFT 0.75: fail
  cells[2].shape = workload_shape::mooncake;
  cells[2].modes = six_modes(0.55, 2000, 8000); // both pass
  for (auto& c : cells)
    c.targets = shape_targets(c.modes, slo);
  auto sut = tally_targets(cells);
  REQUIRE(sut.size() == 3);
  CHECK(sut[0].id == "no_failed_requests");
  CHECK(sut[0].passed == 3);
  CHECK(sut[1].id == "shape_overlap_goodput_vs_best_other");
  CHECK(sut[1].cells == 3);
  CHECK(sut[1].passed == 1);
  CHECK(sut[1].failed == 2);
  CHECK(sut[1].worst_cell == 1);
  CHECK(sut[1].description.find("(") == std::string::npos); // the grid's meaning, no cell's figures
  CHECK(sut[2].passed == 1);
  CHECK(sut[2].failed == 1);
  CHECK(sut[2].not_evaluated == 1);
  CHECK(sut[2].worst_cell == 1);
  CHECK(cell_name(cells[1]) == "decode-heavy, load 2.0, shared");

  shapes_report r;
  r.loads = {1.0, 2.0};
  r.devices = {backends::transfer_overlap::shared, backends::transfer_overlap::full};
  r.cells = cells;
  const auto text = format_grid(r);
  CHECK(text.find("summary over 3 cells") != std::string::npos);
  CHECK(text.find("worst 0.800 (decode-heavy, load 2.0, shared)") != std::string::npos);
}

TEST_CASE("bench shapes: the JSON holds every cell's modes and targets and the chart one panel per shape and ratio") {
  const slo_set slo;
  shapes_report r;
  r.loads = {1.0, 2.0};
  r.devices = {backends::transfer_overlap::none, backends::transfer_overlap::full};
  for (auto s : {workload_shape::conv, workload_shape::prefill_heavy})
    r.shapes.push_back({s, {}});
  for (auto s : {workload_shape::conv, workload_shape::prefill_heavy})
    for (double load : r.loads)
      for (auto d : r.devices) {
        shape_cell c;
        c.shape = s;
        c.load = load;
        c.device = d;
        c.modes = six_modes(0.5, 2000, 8000);
        c.targets = shape_targets(c.modes, slo);
        r.cells.push_back(std::move(c));
      }
  auto j = shapes_json(r);
  REQUIRE(j["cells"].size() == 8);
  const auto& last = j["cells"][7];
  CHECK(last["shape"] == "prefill-heavy");
  CHECK(last["load"] == 2.0);
  CHECK(last["device"] == "full");
  CHECK(last["modes"].size() == 6);
  CHECK(last["modes"]["overlap"]["goodput_req_s"] == 0.5);
  CHECK(last["overlap_goodput_vs_best_other"] == 1.0);
  CHECK(last["overlap_interactive_ttft_p99_vs_prio_fcfs"] == 0.25);
  CHECK(last["targets"].size() == 3);
  CHECK(j["shapes"].contains("prefill-heavy"));
  CHECK(j["summary"].size() == 3);
  CHECK(j["summary"][1]["passed"] == 8);

  auto page = shapes_plot(r);
  REQUIRE(page.panels.size() == 4); // goodput and TTFT ratio per shape
  CHECK(page.columns == 2);
  for (auto& p : page.panels) {
    REQUIRE(p.series.size() == 3); // one per device, then the target
    CHECK(p.series[0].title == "none");
    CHECK(p.series[0].points.size() == 2); // one per load
  }
  CHECK(page.panels[0].series[2].points.front().second == shape_goodput_min_ratio);
  CHECK(page.panels[2].series[2].points.front().second == shape_ttft_max_ratio);
}

TEST_CASE("bench shapes: a small grid runs every mode in every cell on the same requests") {
  const auto dir = std::filesystem::temp_directory_path()
                   / ("kvlane-bench-shapes-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto csv = (dir / "conv.csv").string();
  {
    std::ofstream out{csv};
    out << "TIMESTAMP,ContextTokens,GeneratedTokens\n0,120,12\n0.5,80,20\n1,200,8\n1.2,60,16\n"
           "2,90,10\n";
  }
  auto o = parse({"--shapes", "conv,decode-heavy", "--azure-trace", csv, "--requests", "4",
                  "--modes", "fcfs,prio-fcfs,overlap", "--sweep", "1.0,2.0", "--devices",
                  "none,full", "--interactive-share", "0.5", "--quiet"});
  REQUIRE(o.has_value());
  bench_setup setup;
  setup.cfg = test::fast_bench_profile();
  setup.sim = true;
  setup.time_scale = setup.cfg.models.front().backend.sim.time_scale;
  setup.info.slots = setup.cfg.models.front().backend.sim.slots;
  setup.info.max_context = setup.cfg.models.front().backend.sim.max_context;
  setup.info.caps.transfer_overlaps_compute = true;
  std::size_t seen = 0;
  auto sut = run_shapes(*o, setup, {}, [&](const shape_cell&) { ++seen; });
  std::filesystem::remove_all(dir);
  REQUIRE(sut.has_value());
  REQUIRE(sut->cells.size() == 8); // 2 shapes x 2 loads x 2 devices
  CHECK(seen == 8);
  REQUIRE(sut->shapes.size() == 2);
  CHECK(sut->shapes[0].ctx.requests == 4);
  CHECK(sut->shapes[1].ctx.requests == 4);
  for (std::size_t i = 0; i < sut->cells.size(); ++i) {
    const auto& c = sut->cells[i];
    CAPTURE(cell_name(c));
    CHECK(c.shape == (i < 4 ? workload_shape::conv : workload_shape::decode_heavy));
    CHECK(c.load == (i % 4 < 2 ? 1.0 : 2.0));
    CHECK(c.device == (i % 2 == 0 ? backends::transfer_overlap::none
                                  : backends::transfer_overlap::full));
    REQUIRE(c.modes.size() == 3);
    CHECK(c.targets.size() == 3);
    // Forced output lengths: the same requests give the same tokens in
    // every mode and under every device of the shape.
    const auto& first = sut->cells[i < 4 ? 0 : 4].modes.front();
    for (auto& m : c.modes) {
      CAPTURE(m.mode);
      CHECK(m.completed == 4);
      CHECK(m.output_tokens == first.output_tokens);
    }
  }
  CHECK(sut->cells[0].offered_load == doctest::Approx(1.0));
  CHECK(sut->cells[2].offered_load == doctest::Approx(2.0));
}
