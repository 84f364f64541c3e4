#pragma once

// kvlane::tools::probe — measures what a backend's device really does.
//
// For one backend it measures step time against rows and tokens (and fits
// base + per-token cost), dump and load time and bandwidth of one snapshot,
// and whether a transfer on one slot overlaps steps on the others: the same
// work is run serially, then concurrently from two threads (compute lane,
// transfer lane), and overlap = (serial - concurrent) / min(step work,
// transfer work), clamped to 0..1 — 1 means fully hidden, 0 means serialized.
//
// The probe owns the backend while it runs: it overwrites every slot. Run it
// with the daemon stopped. Times are reported in device milliseconds: wall
// time multiplied by `clock_scale` (the sim's time_scale; 1 on hardware).

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools {

struct probe_options {
  std::uint32_t iterations = 5;     ///< repetitions per measurement (>= 1)
  std::uint32_t snapshot_tokens = 0; ///< tokens in the probed slot; 0 = max_context / 2
  double clock_scale = 1.0;         ///< device ms per wall ms
};

struct step_sample {
  std::uint32_t rows = 0;
  std::uint32_t tokens_per_row = 0;
  double ms = 0; ///< mean device ms per step
};

struct probe_report {
  backends::backend_info info;
  double clock_scale = 1.0;
  std::vector<step_sample> steps;
  double step_base_ms = 0;      ///< least-squares fit: ms = base + per_token * tokens
  double step_per_token_ms = 0;
  std::uint32_t snapshot_tokens = 0;
  std::uint64_t snapshot_bytes = 0;
  double dump_ms = 0, load_ms = 0;           ///< mean device ms per call
  double dump_gib_s = 0, load_gib_s = 0;     ///< bandwidth in device time
  bool overlap_measured = false;             ///< false with a single slot
  double step_work_ms = 0, transfer_work_ms = 0; ///< serial parts
  double serial_ms = 0, concurrent_ms = 0;
  double overlap = 0;                        ///< 0..1
};

using probe_progress = std::function<void(std::string_view)>;

expected<probe_report, backends::backend_error> run_probe(backends::backend& b,
                                                          const probe_options& opts,
                                                          const probe_progress& progress = {});

/// Human-readable report (several lines).
std::string format_text(const probe_report& r);

/// The same figures as one JSON object on one line; a figure that is not
/// finite is null (tools/json_figure).
std::string format_json(const probe_report& r);

} // namespace kvlane::tools
