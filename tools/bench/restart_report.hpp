#pragma once

// kvlane::tools::bench — restart_report: the figures of a restart benchmark
// (--restart), against the baseline run of the same invocation.
//
// Problem it solves: "the store survives" is judged on what the conversations
// see: the prompt tokens served from retained KV, the first-token latency of
// turns that had a reusable prefix, and no failed request, each run as a
// ratio of the baseline (the same requests, the same half-way pause, no
// event), side by side with the targets (>= 0.9 x, <= 1.2 x, 0). Also what
// the event cost: the restart-to-serving times, the swap, and the disk
// tier's write-back bandwidth against the rate the simulated device moves
// snapshot bytes. The JSON field names are part of the interface
// (docs/benchmarks.md).
//
// Threading: plain functions over values.

#include "tools/bench/report.hpp"
#include "tools/bench/restart_driver.hpp"
#include "tools/bench/reuse_report.hpp"

#include <nlohmann/json.hpp>

#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

/// One run read against the baseline.
struct restart_summary {
  static constexpr double none = std::numeric_limits<double>::quiet_NaN();
  std::string run;          ///< baseline, fdstore, disk or swap
  reuse_summary reuse;      ///< its figures as a reuse run (reused tokens, TTFT, failures)
  restart_figures figures;  ///< what the half-way event cost
  double reused_vs_baseline = none;     ///< reused tokens / the baseline's
  double reusable_ttft_vs_baseline = none; ///< reusable-prefix TTFT p50 / the baseline's
};

/// The simulated device's transfer bandwidth as the run moves bytes: a full
/// snapshot per mean dump time, the dump time in wall time (simulated ms /
/// time_scale), since the disk tier's write-back is measured on the wall clock.
struct device_bandwidth {
  std::uint64_t snapshot_bytes = 0;
  double dump_ms_mean = 0; ///< simulated
  double time_scale = 1;
  double mib_per_s() const noexcept;
};

/// Reads `r` (the run of `requests`, same order) against `baseline` (null:
/// it is the baseline).
restart_summary summarize_restart(const restart_result& r, std::span<const trace_request> requests,
                                  const restart_summary* baseline);

/// Per run besides the baseline: reused tokens >= 0.9 x the baseline's,
/// reusable-prefix TTFT p50 <= 1.2 x; per run, the baseline included: no
/// failed or timed-out request.
std::vector<target_check> restart_targets(const std::vector<restart_summary>& runs);

/// The comparison, the restart and swap times, the disk tier's write-back
/// against the device, and the targets with pass/fail.
std::string format_restart(const std::vector<restart_summary>& runs,
                           const std::vector<target_check>& targets,
                           const device_bandwidth& device);

/// The top-level "restart" object of the JSON report.
nlohmann::ordered_json restart_json(const std::vector<restart_summary>& runs,
                                    const device_bandwidth& device);

} // namespace kvlane::tools::bench
