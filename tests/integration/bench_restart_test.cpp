// kvlane-bench --restart end to end: a tiny conversation trace through real
// kvlaned children, with a restart through the fd store, a restart from the
// disk tier and a model swap half way, each against the baseline.
#include "tools/bench/bench_cli.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace kvlane;
using namespace kvlane::tools::bench;
using json = nlohmann::json;

namespace {

/// A Mooncake trace: `conversations` conversations of `turns` turns, the
/// turns of one 10 s apart, each turn one 512-token block longer than the
/// previous (block 0 the shared system prompt, block 1 names the conversation).
std::string tiny_trace(int conversations, int turns) {
  std::string out;
  int next_block = 1000;
  std::vector<std::vector<int>> blocks(static_cast<std::size_t>(conversations));
  for (int c = 0; c < conversations; ++c)
    blocks[static_cast<std::size_t>(c)] = {0, next_block++};
  for (int t = 0; t < turns; ++t)
    for (int c = 0; c < conversations; ++c) {
      auto& b = blocks[static_cast<std::size_t>(c)];
      b.push_back(next_block++);
      std::string ids;
      for (int id : b)
        ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      out += fmt::format(R"({{"timestamp": {}, "input_length": {}, "output_length": 16, )"
                         R"("hash_ids": [{}]}})"
                         "\n",
                         t * 10000 + c * 500, b.size() * 512, ids);
    }
  return out;
}

} // namespace

TEST_CASE("bench restart: a conversation sample survives a restart through the fd store, a "
          "restart from the disk tier and a model swap, with no failed request") {
  test::temp_dir dir;
  const auto trace = dir.write("conv.jsonl", tiny_trace(4, 4));
  const auto out = dir.path() + "/restart.json";
  std::vector<std::string_view> args{
    "--trace",    trace,     "--requests", "0",          "--input-scale", "0.125",
    "--rate-scale", "1",     "--restart",  "fdstore,disk,swap", "--time-scale", "100",
    "--timeout",  "60",      "--kvlaned",  KVLANED_PATH, "--json",        out,
    "--quiet"};
  auto opts = parse_args(args);
  REQUIRE_MESSAGE(opts.has_value(), (opts ? std::string{} : opts.error()));
  REQUIRE(run_bench(*opts) == 0);

  std::ifstream f{out};
  std::stringstream text;
  text << f.rdbuf();
  const auto sut = json::parse(text.str(), nullptr, false);
  REQUIRE_FALSE(sut.is_discarded());
  CHECK(sut["path"] == "ipc");
  const auto& restart = sut["restart"];
  CHECK(restart["half_way"]["requests_before"] == 8);
  const auto& runs = restart["runs"];
  for (const auto* name : {"baseline", "fdstore", "disk", "swap"}) {
    CAPTURE(name);
    REQUIRE(runs.contains(name));
    const auto& r = runs[name];
    CHECK(r["completed"] == 16);
    CHECK(r["failed"] == 0);
    CHECK(r["timed_out"] == false);
    for (const auto* key : {"reused_tokens", "ttft_p50_reusable_ms", "reused_vs_baseline",
                            "reusable_ttft_p50_vs_baseline", "drain_ms", "event_ms", "shift_ms",
                            "first_ttft_ms"})
      CHECK_MESSAGE(r[key].is_number(), key);
    CHECK(sut["reuse"].contains(name));
  }
  CHECK(runs["baseline"]["reused_tokens"].get<std::uint64_t>() > 0);
  CHECK(runs["baseline"]["reused_vs_baseline"] == 1);
  // The restarts: timed, and the store came back (through the fd store; from disk).
  for (const auto* name : {"fdstore", "disk"}) {
    CAPTURE(name);
    CHECK(runs[name]["restart_to_ready_ms"].is_number());
    CHECK(runs[name]["stop_ms"].is_number());
    CHECK(runs[name]["swap_ms"].is_null());
  }
  CHECK(runs["fdstore"]["restored_snapshots"].get<std::uint64_t>() > 0);
  CHECK(runs["disk"]["disk_only_snapshots"].get<std::uint64_t>() > 0);
  CHECK(runs["baseline"]["restart_to_ready_ms"].is_null());
  CHECK(runs["swap"]["swap_ms"].is_number());
  CHECK(runs["swap"]["restart_to_ready_ms"].is_null());
  // The disk tier's write-back against the device's bandwidth.
  REQUIRE(restart["disk_writeback"].is_object());
  CHECK(restart["disk_writeback"]["snapshots"].get<std::uint64_t>() > 0);
  CHECK(restart["disk_writeback"]["vs_device"].is_number());
  CHECK(restart["device_bandwidth"]["mib_per_s"].get<double>() > 0);
  // The targets, side by side with pass/fail; no request failed anywhere.
  std::vector<std::string> ids;
  for (const auto& t : sut["targets"]) {
    ids.push_back(t["id"]);
    if (t["id"].get<std::string>().ends_with("_no_failed_requests"))
      CHECK(t["pass"] == true);
  }
  for (const auto* id : {"baseline_no_failed_requests", "fdstore_reused_vs_baseline",
                         "fdstore_reusable_ttft_p50_vs_baseline", "disk_reused_vs_baseline",
                         "swap_reused_vs_baseline", "swap_no_failed_requests"})
    CHECK_MESSAGE(std::find(ids.begin(), ids.end(), id) != ids.end(), id);
}
