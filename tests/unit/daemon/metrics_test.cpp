#include "daemon/metrics.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <regex>
#include <sstream>

using namespace kvlane;

namespace {

// Records one request that ended with `reason` and these timings.
void record(daemon::metrics& sut, std::string_view model, actors::end_reason reason,
            double ttft_ms, double e2e_ms, std::uint32_t generated) {
  actors::stream_end end;
  end.reason = reason;
  end.ttft_ms = ttft_ms;
  end.tpot_ms = generated > 1 ? (e2e_ms - ttft_ms) / (generated - 1) : 0;
  end.e2e_ms = e2e_ms;
  end.generated_tokens = generated;
  actors::completion c;
  c.model = model;
  c.client = "test";
  c.end = &end;
  sut.record(c);
}

struct parsed {
  std::map<std::string, std::string> types;           // family -> type
  std::map<std::string, double> samples;              // "name{labels}" -> value
};

// Parses the text exposition strictly: every line is a HELP, a TYPE or a
// sample of a declared family. Fails the test on anything else.
parsed parse(const std::string& text) {
  static const std::regex help{R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)"};
  static const std::regex type{R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)"};
  static const std::regex sample{
    R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*\})? (-?[0-9]+(\.[0-9]+)?|NaN|\+Inf)$)"};
  parsed out;
  std::istringstream in{text};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    CAPTURE(n);
    CAPTURE(line);
    std::smatch m;
    if (std::regex_match(line, m, help))
      continue;
    if (std::regex_match(line, m, type)) {
      out.types[m[1]] = m[2];
      continue;
    }
    REQUIRE(std::regex_match(line, m, sample));
    std::string name = m[1];
    std::string family = name;
    for (auto suffix : {"_bucket", "_sum", "_count"})
      if (!out.types.count(family) && family.ends_with(suffix))
        family = family.substr(0, family.size() - std::string_view{suffix}.size());
    CHECK_MESSAGE(out.types.count(family) == 1, "sample of an undeclared family: " << name);
    auto key = line.substr(0, line.rfind(' '));
    CHECK_MESSAGE(out.samples.count(key) == 0, "duplicate series: " << key);
    out.samples[key] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  CHECK(n > 20);
  return out;
}

} // namespace

TEST_CASE("metrics: the exposition parses line by line and carries every required family") {
  daemon::metrics sut{{"m1", "m2"}};
  record(sut, "m1", actors::end_reason::length, 40, 400, 10);
  record(sut, "m1", actors::end_reason::length, 2000, 9000, 50);
  record(sut, "m1", actors::end_reason::cancelled, 0, 5, 0);
  record(sut, "m2", actors::end_reason::error, 10, 20, 2);
  record(sut, "unknown", actors::end_reason::error, 10, 20, 2); // ignored

  actors::scheduler_stats s1;
  s1.model = "m1";
  s1.slots = 16;
  s1.slots_busy = 5;
  s1.without_slot_interactive = 2;
  s1.without_slot_batch = 7;
  s1.swaps = 11;
  s1.recomputes = 3;
  s1.dumps = 11;
  s1.loads = 9;
  s1.dump_ms_total = 450;
  s1.load_ms_total = 150;
  s1.transfer_ms = 600;
  s1.transfer_hidden_ms = 540;
  s1.tokens_generated = 60;
  s1.masks.observe(1500, true); // 1.5 ms, hidden by its step
  s1.masks.hidden = 1;
  s1.masks.observe(500, true); // done after the step's result
  s1.masks.observe(250, false);
  s1.device = actors::device_health::failing;
  s1.device_backoff_ms = 400;
  s1.faults.step_retries = 5;
  s1.faults.isolated_rows = 8;
  s1.faults.row_faults = 1;
  s1.faults.backoffs = 2;
  actors::scheduler_stats s2;
  s2.model = "m2";
  ipc::store_stats store;
  store.used_bytes = 64 << 20;
  store.committed_bytes = 60 << 20;
  store.pool_bytes = 20 << 20;
  store.limit_bytes = 8ull << 30;
  store.evictions = 4;

  auto p = parse(sut.render({s1, s2}, store, 3));
  for (auto family : {"kvlane_requests_total", "kvlane_ttft_seconds", "kvlane_tpot_seconds",
                      "kvlane_e2e_seconds", "kvlane_tokens_generated_total", "kvlane_slots_busy",
                      "kvlane_sequences_without_slot", "kvlane_preemptions_total",
                      "kvlane_transfers_total", "kvlane_transfer_seconds_total", "kvlane_transfer_overlap_seconds_total",
                      "kvlane_grammar_masks_total", "kvlane_grammar_mask_seconds_total",
                      "kvlane_store_bytes", "kvlane_store_limit_bytes",
                      "kvlane_store_evictions_total", "kvlane_clients_connected",
                      "kvlane_device_state", "kvlane_device_backoff_seconds",
                      "kvlane_step_fault_events_total"})
    CHECK_MESSAGE(p.types.count(family) == 1, family);

  CHECK(p.samples["kvlane_requests_total{model=\"m1\",outcome=\"length\"}"] == 2);
  CHECK(p.samples["kvlane_requests_total{model=\"m1\",outcome=\"cancelled\"}"] == 1);
  CHECK(p.samples["kvlane_requests_total{model=\"m2\",outcome=\"error\"}"] == 1);
  CHECK(p.samples["kvlane_ttft_seconds_count{model=\"m1\"}"] == 2); // the cancelled one had no token
  CHECK(p.samples["kvlane_ttft_seconds_bucket{model=\"m1\",le=\"0.05\"}"] == 1);
  CHECK(p.samples["kvlane_ttft_seconds_bucket{model=\"m1\",le=\"2.5\"}"] == 2);
  CHECK(p.samples["kvlane_ttft_seconds_sum{model=\"m1\"}"] == doctest::Approx(2.04));
  CHECK(p.samples["kvlane_e2e_seconds_count{model=\"m1\"}"] == 3);
  CHECK(p.samples["kvlane_sequences_without_slot{model=\"m1\",class=\"batch\"}"] == 7);
  CHECK(p.samples["kvlane_preemptions_total{model=\"m1\",kind=\"recompute\"}"] == 3);
  CHECK(p.samples["kvlane_transfer_seconds_total{model=\"m1\",kind=\"dump\"}"] ==
        doctest::Approx(0.45));
  CHECK(p.samples["kvlane_transfer_overlap_seconds_total{model=\"m1\",part=\"exposed\"}"] ==
        doctest::Approx(0.06));
  CHECK(p.samples["kvlane_grammar_masks_total{model=\"m1\",when=\"hidden\"}"] == 1);
  CHECK(p.samples["kvlane_grammar_masks_total{model=\"m1\",when=\"late\"}"] == 1);
  CHECK(p.samples["kvlane_grammar_masks_total{model=\"m1\",when=\"at_sampling\"}"] == 1);
  CHECK(p.samples["kvlane_grammar_mask_seconds_total{model=\"m1\"}"] == doctest::Approx(0.00225));
  CHECK(p.samples["kvlane_grammar_masks_total{model=\"m2\",when=\"hidden\"}"] == 0);
  CHECK(p.samples["kvlane_store_bytes{state=\"committed\"}"] == double(60 << 20));
  CHECK(p.samples["kvlane_store_bytes{state=\"warm_pool\"}"] == double(20 << 20));
  CHECK(p.samples["kvlane_clients_connected"] == 3);
  CHECK(p.samples["kvlane_device_state{model=\"m1\"}"] == 2);
  CHECK(p.samples["kvlane_device_state{model=\"m2\"}"] == 0);
  CHECK(p.samples["kvlane_device_backoff_seconds{model=\"m1\"}"] == doctest::Approx(0.4));
  CHECK(p.samples["kvlane_step_fault_events_total{model=\"m1\",kind=\"retry\"}"] == 5);
  CHECK(p.samples["kvlane_step_fault_events_total{model=\"m1\",kind=\"isolated_row\"}"] == 8);
  CHECK(p.samples["kvlane_step_fault_events_total{model=\"m1\",kind=\"row_fault\"}"] == 1);
  CHECK(p.samples["kvlane_step_fault_events_total{model=\"m1\",kind=\"backoff\"}"] == 2);

  // Histogram buckets are cumulative and end at the count.
  double last = 0;
  for (auto b : daemon::histogram::bounds) {
    auto v = p.samples[fmt::format("kvlane_e2e_seconds_bucket{{model=\"m1\",le=\"{}\"}}", b)];
    CHECK(v >= last);
    last = v;
  }
  CHECK(p.samples["kvlane_e2e_seconds_bucket{model=\"m1\",le=\"+Inf\"}"] == 3);
}
