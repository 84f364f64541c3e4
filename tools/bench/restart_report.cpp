#include "tools/bench/restart_report.hpp"

#include "tools/json_figure.hpp"

#include <fmt/format.h>

#include <cmath>

namespace kvlane::tools::bench {

namespace {

using json = nlohmann::ordered_json;
using tools::json_figure;

constexpr double reused_floor = 0.9;  ///< reused tokens, at least this x the baseline's
constexpr double ttft_ceiling = 1.2;  ///< reusable-prefix TTFT p50, at most this x the baseline's

double ratio(double a, double b) {
  return std::isfinite(a) && std::isfinite(b) && b != 0 ? a / b
                                                        : std::numeric_limits<double>::quiet_NaN();
}

std::string num(double x, int decimals) {
  return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : std::string{"-"};
}

target_check target(std::string id, std::string description, double value, double threshold,
                    bool at_least) {
  target_check t{std::move(id), std::move(description), value, threshold, at_least, std::nullopt};
  t.pass = std::isfinite(value) && (at_least ? value >= threshold : value <= threshold);
  return t;
}

double failures(const restart_summary& s) {
  return static_cast<double>(s.reuse.failed) + (s.reuse.timed_out ? 1.0 : 0.0);
}

std::string verdict(const std::vector<target_check>& targets, const std::string& id) {
  for (const auto& t : targets)
    if (t.id == id)
      return !t.pass ? "--" : *t.pass ? "PASS" : "FAIL";
  return "";
}

} // namespace

double device_bandwidth::mib_per_s() const noexcept {
  if (!(dump_ms_mean > 0) || !(time_scale > 0))
    return std::numeric_limits<double>::quiet_NaN();
  const double wall_s = dump_ms_mean / time_scale / 1000.0;
  return static_cast<double>(snapshot_bytes) / (1 << 20) / wall_s;
}

restart_summary summarize_restart(const restart_result& r, std::span<const trace_request> requests,
                                  const restart_summary* baseline) {
  restart_summary s;
  s.run = std::string{to_string(r.kind)};
  s.reuse = summarize_reuse(s.run, r.run, requests);
  s.figures = r.figures;
  if (baseline) {
    s.reused_vs_baseline = ratio(static_cast<double>(s.reuse.reused_tokens),
                                 static_cast<double>(baseline->reuse.reused_tokens));
    s.reusable_ttft_vs_baseline =
      ratio(s.reuse.ttft_p50_reusable_ms, baseline->reuse.ttft_p50_reusable_ms);
  } else {
    s.reused_vs_baseline = 1;
    s.reusable_ttft_vs_baseline = 1;
  }
  return s;
}

std::vector<target_check> restart_targets(const std::vector<restart_summary>& runs) {
  std::vector<target_check> out;
  for (const auto& s : runs) {
    if (s.run != "baseline") {
      out.push_back(target(s.run + "_reused_vs_baseline",
                           fmt::format("{} reuses >= {} x the baseline's prompt tokens", s.run,
                                       reused_floor),
                           s.reused_vs_baseline, reused_floor, true));
      out.push_back(target(s.run + "_reusable_ttft_p50_vs_baseline",
                           fmt::format("{} TTFT p50 of requests with a reusable prefix <= {} x "
                                       "the baseline's",
                                       s.run, ttft_ceiling),
                           s.reusable_ttft_vs_baseline, ttft_ceiling, false));
    }
    out.push_back(target(s.run + "_no_failed_requests",
                         fmt::format("{}: failed or timed-out requests == 0", s.run), failures(s),
                         0, false));
  }
  return out;
}

std::string format_restart(const std::vector<restart_summary>& runs,
                           const std::vector<target_check>& targets,
                           const device_bandwidth& device) {
  std::string out;
  if (runs.empty())
    return out;
  const auto& half = runs.front().figures;
  out += fmt::format("half way: after request {} (the next one's trace time {:.0f} s): no new "
                     "turn until the ones in flight ended, then the event, then the rest at "
                     "their trace times shifted by the pause past the next one's\n\n",
                     half.half, half.half_way_s);
  out += fmt::format("{:<10}{:>14}{:>9}{:>6}{:>20}{:>9}{:>6}{:>8}{:>6}\n", "run", "reused tokens",
                     "x base", ">=0.9", "reusable TTFT p50", "x base", "<=1.2", "failed", "=0");
  for (const auto& s : runs) {
    const bool base = s.run == "baseline";
    out += fmt::format(
      "{:<10}{:>14}{:>9}{:>6}{:>20}{:>9}{:>6}{:>8}{:>6}\n", s.run, s.reuse.reused_tokens,
      base ? "1" : num(s.reused_vs_baseline, 3),
      base ? "" : verdict(targets, s.run + "_reused_vs_baseline"),
      num(s.reuse.ttft_p50_reusable_ms, 0), base ? "1" : num(s.reusable_ttft_vs_baseline, 3),
      base ? "" : verdict(targets, s.run + "_reusable_ttft_p50_vs_baseline"),
      static_cast<std::uint64_t>(failures(s)), verdict(targets, s.run + "_no_failed_requests"));
  }
  out += "(TTFT in simulated ms; reusable: requests whose prompt had a prefix an earlier one "
         "sent)\n\n";

  out += fmt::format("{:<10}{:>10}{:>10}{:>10}{:>12}{:>14}{:>14}{:>14}\n", "wall ms", "drain",
                     "event", "shift", "stop", "to READY=1", "first TTFT", "other model");
  for (const auto& s : runs) {
    const auto& f = s.figures;
    out += fmt::format("{:<10}{:>10}{:>10}{:>10}{:>12}{:>14}{:>14}{:>14}\n", s.run,
                       num(f.drain_ms, 0), num(f.event_ms, 0), num(f.shift_ms, 0),
                       num(f.stop_ms, 0), num(f.restart_to_ready_ms, 0), num(f.first_ttft_ms, 0),
                       num(f.swap_ms, 0));
  }
  out += "(drain: last first-half request sent to its last end; event: drained to serving again; "
         "stop: SIGTERM to the old\nkvlaned's exit; to READY=1: SIGTERM to the new one's "
         "READY=1; first TTFT: the first request after the event;\nother model: the swap's "
         "request to the second model, submit to end)\n";

  for (const auto& s : runs) {
    const auto& f = s.figures;
    if (s.run == "fdstore" || s.run == "disk")
      out += fmt::format("{}: restart to serving (SIGTERM to READY=1 of the new kvlaned) {:.0f} "
                         "ms, of which the new process's start to READY=1 {:.0f} ms; {} retained "
                         "snapshots taken back{}\n",
                         s.run, f.restart_to_ready_ms, f.start_to_ready_ms, f.restored_snapshots,
                         s.run == "disk"
                           ? fmt::format(" ({} on disk only), {} read back from disk ({:.1f} MiB)",
                                         f.disk_only_snapshots, f.disk_reads,
                                         static_cast<double>(f.disk_read_bytes) / (1 << 20))
                           : std::string{});
  }
  for (const auto& s : runs) {
    if (s.run != "disk")
      continue;
    const double dev = device.mib_per_s();
    if (const auto& w = s.figures.writeback)
      out += fmt::format("disk tier write-back: {} snapshots, {:.0f} MiB in {:.2f} s = {:.0f} "
                         "MiB/s (fsyncs included); the device moves a {:.0f} KiB snapshot per "
                         "{:.1f} ms simulated = {:.0f} MiB/s of wall time at time_scale {}: "
                         "write-back / device = {}\n",
                         w->snapshots, w->mib, w->seconds, w->mib_per_s,
                         static_cast<double>(device.snapshot_bytes) / 1024, device.dump_ms_mean,
                         dev, device.time_scale, num(ratio(w->mib_per_s, dev), 2));
    else
      out += "disk tier write-back: the first kvlaned logged none (nothing written back)\n";
  }
  return out;
}

json restart_json(const std::vector<restart_summary>& runs, const device_bandwidth& device) {
  json j;
  if (!runs.empty())
    j["half_way"] = json{{"requests_before", runs.front().figures.half},
                         {"trace_time_s", json_figure(runs.front().figures.half_way_s)}};
  auto& out = j["runs"] = json::object();
  std::optional<disk_writeback> writeback;
  for (const auto& s : runs) {
    const auto& f = s.figures;
    json r;
    r["reused_tokens"] = s.reuse.reused_tokens;
    r["achievable_reused_tokens"] = s.reuse.achievable_reused_tokens;
    r["ttft_p50_reusable_ms"] = json_figure(s.reuse.ttft_p50_reusable_ms);
    r["completed"] = s.reuse.completed;
    r["failed"] = s.reuse.failed;
    r["timed_out"] = s.reuse.timed_out;
    r["reused_vs_baseline"] = json_figure(s.reused_vs_baseline);
    r["reusable_ttft_p50_vs_baseline"] = json_figure(s.reusable_ttft_vs_baseline);
    r["drain_ms"] = json_figure(f.drain_ms);
    r["event_ms"] = json_figure(f.event_ms);
    r["shift_ms"] = json_figure(f.shift_ms);
    r["stop_ms"] = json_figure(f.stop_ms);
    r["restart_to_ready_ms"] = json_figure(f.restart_to_ready_ms);
    r["start_to_ready_ms"] = json_figure(f.start_to_ready_ms);
    r["first_ttft_ms"] = json_figure(f.first_ttft_ms);
    r["swap_ms"] = json_figure(f.swap_ms);
    r["restored_snapshots"] = f.restored_snapshots;
    r["disk_only_snapshots"] = f.disk_only_snapshots;
    r["disk_reads"] = f.disk_reads;
    r["disk_read_bytes"] = f.disk_read_bytes;
    out[s.run] = std::move(r);
    if (s.run == "disk" && f.writeback)
      writeback = f.writeback;
  }
  j["device_bandwidth"] = json{{"snapshot_bytes", device.snapshot_bytes},
                               {"dump_ms_mean", json_figure(device.dump_ms_mean)},
                               {"time_scale", json_figure(device.time_scale)},
                               {"mib_per_s", json_figure(device.mib_per_s())}};
  if (writeback)
    j["disk_writeback"] = json{{"snapshots", writeback->snapshots},
                               {"mib", json_figure(writeback->mib)},
                               {"seconds", json_figure(writeback->seconds)},
                               {"mib_per_s", json_figure(writeback->mib_per_s)},
                               {"vs_device", json_figure(ratio(writeback->mib_per_s,
                                                               device.mib_per_s()))}};
  else
    j["disk_writeback"] = nullptr;
  return j;
}

} // namespace kvlane::tools::bench
