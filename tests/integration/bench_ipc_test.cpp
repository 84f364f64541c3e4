// kvlane-bench --path ipc end to end: the real kvlaned as a child process of
// the bench, driven through the client library.
#include "tools/bench/bench_cli.hpp"
#include "tools/bench/ipc_driver.hpp"
#include "tools/bench/report.hpp"
#include "tests/support/temp_dir.hpp"

#include "tests/support/bench_profile.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace kvlane;
using namespace kvlane::tools::bench;
using json = nlohmann::json;

namespace {

std::vector<trace_request> ten_requests() {
  auto reqs = test::small_synthetic(10, 5);
  mark_interactive(reqs, 0.3, 5);
  return reqs;
}

} // namespace

TEST_CASE("bench ipc: ten synthetic requests complete through a kvlaned child in overlap mode") {
  const auto reqs = ten_requests();
  ipc_run_options opts;
  opts.run.cfg = test::fast_bench_profile();
  opts.run.time_scale = opts.run.cfg.models.front().backend.sim.time_scale;
  opts.run.timeout = std::chrono::seconds(30);
  opts.kvlaned_path = KVLANED_PATH;
  auto r = run_mode_ipc(opts, actors::scheduler_mode::overlap, reqs);
  REQUIRE_MESSAGE(r.has_value(), (r ? std::string{} : r.error()));
  CHECK_FALSE(r->timed_out);
  CHECK(r->store_peaks_known); // from the admin status
  auto sut = summarize(*r);
  CHECK(sut.completed == 10);
  CHECK(sut.failed == 0);
  std::uint64_t want = 0;
  for (auto& q : reqs)
    want += q.output_tokens;
  CHECK(sut.output_tokens == want); // forced output lengths
  CHECK(r->stats.tokens_generated == want);
  CHECK(r->stats.finished == 10);
  CHECK(r->stats.steps > 0);
  CHECK(sut.throughput_tok_s > 0);
  CHECK(std::isfinite(sut.ttft_p99_ms));
  CHECK(std::isfinite(sut.tpot_p99_ms));
  CHECK(sut.npu_busy > 0);
  CHECK(sut.npu_busy <= 1.05);
  CHECK(std::isnan(sut.step_stretch)); // the daemon does not report prefill tokens
}

TEST_CASE("bench ipc: --path both writes both paths and the ipc over inproc ratio to the JSON") {
  test::temp_dir dir;
  const auto out = dir.path() + "/bench.json";
  std::vector<std::string_view> args{"--synthetic",   "--requests",     "10",
                                     "--rate",        "5",              "--prompt-mean",
                                     "100",           "--output-mean",  "20",
                                     "--modes",       "overlap",        "--path",
                                     "both",          "--time-scale",   "500",
                                     "--timeout",     "30",             "--kvlaned",
                                     KVLANED_PATH,    "--json",         out,
                                     "--quiet"};
  auto opts = parse_args(args);
  REQUIRE(opts.has_value());
  REQUIRE(run_bench(*opts) == 0);

  std::ifstream f{out};
  std::stringstream text;
  text << f.rdbuf();
  auto sut = json::parse(text.str(), nullptr, false);
  REQUIRE_FALSE(sut.is_discarded());
  CHECK(sut["path"] == "both");
  const auto& inproc = sut["modes"]["overlap"];
  const auto& ipc = sut["ipc_modes"]["overlap"];
  CHECK(inproc["completed"] == 10);
  CHECK(ipc["completed"] == 10);
  CHECK(ipc["failed"] == 0);
  for (auto key : {"throughput_tok_s", "ttft_p99_ms", "ttft_p99_interactive_ms", "tpot_p99_ms",
                   "e2e_p99_ms", "npu_busy", "preemptions", "swaps", "recomputes",
                   "transfer_hidden", "peak_store_bytes", "ipc_vs_inproc_throughput"}) {
    CAPTURE(key);
    CHECK(inproc.contains(key));
    CHECK(ipc.contains(key));
  }
  CHECK(ipc["peak_store_bytes"].is_number()); // from the daemon's admin status
  CHECK(inproc["peak_store_bytes"].is_number());
  REQUIRE(ipc["ipc_vs_inproc_throughput"].is_number());
  const double ratio = ipc["ipc_vs_inproc_throughput"];
  CHECK(ratio > 0);
  CHECK(ratio == doctest::Approx(ipc["throughput_tok_s"].get<double>()
                                 / inproc["throughput_tok_s"].get<double>())
                   .epsilon(0.001));
  bool target = false;
  for (const auto& t : sut["targets"])
    target = target || t["id"] == "ipc_vs_inproc_throughput_overlap";
  CHECK(target);
}
