#include "tools/bench/bench_options.hpp"
#include "tools/bench/restart_driver.hpp"
#include "tools/bench/restart_report.hpp"
#include "tools/bench/restart_variant.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

expected<bench_options, std::string> parse(std::vector<std::string_view> args) {
  return parse_args(args);
}

restart_summary run_named(std::string run, std::uint64_t reused, double ttft, std::size_t failed) {
  restart_summary s;
  s.run = std::move(run);
  s.reuse.reused_tokens = reused;
  s.reuse.ttft_p50_reusable_ms = ttft;
  s.reuse.failed = failed;
  return s;
}

const target_check* find(const std::vector<target_check>& targets, std::string_view id) {
  for (const auto& t : targets)
    if (t.id == id)
      return &t;
  return nullptr;
}

} // namespace

TEST_CASE("bench restart: --restart names the events in order, drops duplicates and names an "
          "unknown one") {
  auto sut = parse_restart_list("swap,fdstore,swap,disk");
  REQUIRE(sut.has_value());
  CHECK(*sut == std::vector{restart_kind::swap, restart_kind::fd_store, restart_kind::disk});
  auto bad = parse_restart_list("fdstore,reboot");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().find("'reboot'") != std::string::npos);
  CHECK_FALSE(parse_restart_list("baseline").has_value()); // it always runs
}

TEST_CASE("bench restart: the options run through kvlaned in one mode with one user, and refuse "
          "what cannot be honoured") {
  auto sut = parse({"--trace", "t.jsonl", "--restart", "fdstore"});
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string{} : sut.error()));
  CHECK(sut->path == bench_path::ipc);
  CHECK(sut->users == trace_users::one);
  CHECK(sut->modes == std::vector{actors::scheduler_mode::overlap});
  CHECK(sut->restarts == std::vector{restart_kind::fd_store});

  auto need_mooncake = parse({"--trace", "t.csv", "--restart", "disk"});
  REQUIRE_FALSE(need_mooncake.has_value());
  CHECK(need_mooncake.error().find("--restart") != std::string::npos);
  for (auto extra : {std::vector<std::string_view>{"--reuse", "store"},
                     std::vector<std::string_view>{"--path", "both"},
                     std::vector<std::string_view>{"--users", "conversation"},
                     std::vector<std::string_view>{"--modes", "sync,overlap"},
                     std::vector<std::string_view>{"--plot", "x.png"},
                     std::vector<std::string_view>{"--path", "http"}}) {
    std::vector<std::string_view> args{"--trace", "t.jsonl", "--restart", "swap"};
    args.insert(args.end(), extra.begin(), extra.end());
    CAPTURE(extra.front());
    auto r = parse(args);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().find("--restart") != std::string::npos);
  }
}

TEST_CASE("bench restart: the disk lane's stop line gives the write-back figures, the last one "
          "when several") {
  const std::string log =
    "<6>store: disk tier: 3 snapshots written back (0 MiB in 0.01 s, 75 MiB/s), 3 files\n"
    "<6>daemon: stopping\n"
    "<6>store: disk tier: 24 snapshots written back (6 MiB in 0.04 s, 150 MiB/s), 24 files (6 "
    "MiB) on disk\n";
  const auto sut = parse_disk_writeback(log);
  REQUIRE(sut.has_value());
  CHECK(sut->snapshots == 24);
  CHECK(sut->mib == 6);
  CHECK(sut->seconds == doctest::Approx(0.04));
  CHECK(sut->mib_per_s == 150);
  CHECK_FALSE(parse_disk_writeback("<6>daemon: ready: 1 model(s)\n").has_value());
}

TEST_CASE("bench restart: each run is judged against the baseline: reused >= 0.9x, reusable "
          "TTFT p50 <= 1.2x, no failure") {
  std::vector<restart_summary> runs{run_named("baseline", 1000, 100, 0),
                                    run_named("fdstore", 950, 110, 0),
                                    run_named("disk", 800, 130, 1)};
  for (auto& s : runs) {
    s.reused_vs_baseline = static_cast<double>(s.reuse.reused_tokens) / 1000.0;
    s.reusable_ttft_vs_baseline = s.reuse.ttft_p50_reusable_ms / 100.0;
  }
  const auto sut = restart_targets(runs);
  REQUIRE(find(sut, "baseline_no_failed_requests"));
  CHECK(find(sut, "baseline_reused_vs_baseline") == nullptr);
  CHECK(*find(sut, "baseline_no_failed_requests")->pass);
  CHECK(*find(sut, "fdstore_reused_vs_baseline")->pass);
  CHECK(*find(sut, "fdstore_reusable_ttft_p50_vs_baseline")->pass);
  CHECK(*find(sut, "fdstore_no_failed_requests")->pass);
  CHECK_FALSE(*find(sut, "disk_reused_vs_baseline")->pass);             // 0.8 < 0.9
  CHECK_FALSE(*find(sut, "disk_reusable_ttft_p50_vs_baseline")->pass);  // 1.3 > 1.2
  CHECK_FALSE(*find(sut, "disk_no_failed_requests")->pass);
  CHECK(find(sut, "disk_reused_vs_baseline")->value == doctest::Approx(0.8));
}

TEST_CASE("bench restart: the device's bandwidth is a full snapshot per mean dump time of wall "
          "time") {
  device_bandwidth sut{256 << 10, 45.0, 25.0}; // 1.8 ms of wall time per 256 KiB
  CHECK(sut.mib_per_s() == doctest::Approx(0.25 / 0.0018));
  CHECK(std::isnan(device_bandwidth{256 << 10, 0, 25}.mib_per_s()));
}
