#include "backends/sim_backend.hpp"
#include "tools/probe.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <limits>

using namespace kvlane;

namespace {

// A sim whose step and transfer both last 20 wall milliseconds: long enough
// that a scheduling hiccup of a loaded machine (a few ms) barely moves the
// overlap figure, short enough that a probe takes about a second. Memory
// copies are kept small (64 KiB snapshots) so the modeled time dominates the
// real work.
backends::sim_options probe_sim(backends::transfer_overlap overlap) {
  backends::sim_options o;
  o.slots = 4;
  o.max_context = 256;
  o.max_prefill_chunk = 64;
  o.snapshot_bytes = 64 * 1024;
  o.step_base_ms = 40;
  o.step_per_token_ms = 1;
  o.dump_min_ms = 40;
  o.dump_max_ms = 40;
  o.load_min_ms = 40;
  o.load_max_ms = 40;
  o.time_scale = 2; // 40 device ms = 20 wall ms
  o.overlap = overlap;
  return o;
}

tools::probe_report probe(backends::transfer_overlap overlap) {
  auto opts = probe_sim(overlap);
  auto b = backends::sim_backend::create("probe-test", opts);
  REQUIRE(b.has_value());
  tools::probe_options po;
  po.iterations = 3;
  po.clock_scale = opts.time_scale;
  auto sut = tools::run_probe(**b, po);
  REQUIRE(sut.has_value());
  return *sut;
}

} // namespace

TEST_CASE("probe: reports overlap near 1 when the sim runs transfers independently") {
  auto r = probe(backends::transfer_overlap::full);
  REQUIRE(r.overlap_measured);
  CHECK(r.overlap >= 0.7);
  CHECK(r.info.caps.transfer_overlaps_compute);
}

TEST_CASE("probe: reports overlap near 0 when the sim serializes transfers and steps") {
  auto r = probe(backends::transfer_overlap::none);
  REQUIRE(r.overlap_measured);
  CHECK(r.overlap <= 0.3);
  CHECK_FALSE(r.info.caps.transfer_overlaps_compute);
}

TEST_CASE("probe: recovers the sim's step cost model and transfer times as lower bounds") {
  auto r = probe(backends::transfer_overlap::full);
  // Wall time can only exceed the model (noisy machine), so assert lower bounds
  // and a positive per-token slope.
  REQUIRE(r.steps.size() >= 4);
  for (auto& s : r.steps)
    CHECK(s.ms >= 0.95 * (40.0 + 1.0 * s.rows * s.tokens_per_row));
  CHECK(r.step_per_token_ms > 0.5);
  CHECK(r.dump_ms >= 0.95 * 40);
  CHECK(r.load_ms >= 0.95 * 40);
  CHECK(r.snapshot_bytes == 64 * 1024); // extent full_slot: the whole slot
}

TEST_CASE("probe: text and JSON reports carry the overlap figure") {
  auto r = probe(backends::transfer_overlap::full);
  auto text = tools::format_text(r);
  auto json = tools::format_json(r);
  CHECK(text.find("overlap") != std::string::npos);
  CHECK(json.front() == '{');
  CHECK(json.back() == '}');
  CHECK(json.find("\"overlap\":") != std::string::npos);
  CHECK(json.find("\"slots\":4") != std::string::npos);
}

TEST_CASE("probe: the JSON report escapes names and writes a non-finite figure as null") {
  tools::probe_report r;
  r.info.kind = "sim";
  r.info.model = "quoted \"model\"\nname";
  r.steps.push_back({1, 1, 12.5});
  r.overlap = std::numeric_limits<double>::quiet_NaN();
  r.dump_gib_s = std::numeric_limits<double>::infinity();
  auto sut = nlohmann::json::parse(tools::format_json(r));
  CHECK(sut["model"] == r.info.model);
  CHECK(sut["overlap"].is_null());
  CHECK(sut["dump_gib_s"].is_null());
  CHECK(sut["steps"][0]["ms"] == 12.5);
}
