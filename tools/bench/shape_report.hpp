#pragma once

// kvlane::tools::bench — shape_report: the grid of `make bench-shapes`, its targets and outputs.
//
// Problem it solves: one point (a trace at one load on one device) says
// little about whether the default mode is the right default; the grid runs
// every mode in every cell (workload shape x load x device model, the same
// requests for every mode of a cell) and checks, per cell, the targets the
// default mode (overlap) must meet wherever it is deployed:
//
//   - its goodput >= 0.98 x the best other mode's (free-transfer excepted);
//   - its interactive TTFT p99 <= 0.5 x prio-fcfs's, evaluated only where
//     prio-fcfs misses the interactive SLO by more than 2x (its interactive
//     TTFT p99 > 2 x the interactive TTFT bound): elsewhere ordering alone is
//     good enough and there is nothing for preemption to win;
//   - no failed or timed-out request in any mode (a cell that lost requests
//     fails every target it evaluates, as in the comparison's targets).
//
// Then one line per target over the grid (cells passed, failed, not
// evaluated; the worst cell), the JSON of every cell's per-mode figures and
// targets, and the chart: per shape, the two ratios against load, one line
// per device model.
//
// Threading: plain functions over values.

#include "tools/bench/plot.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/workload_shape.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

inline constexpr double shape_goodput_min_ratio = 0.98;
inline constexpr double shape_ttft_max_ratio = 0.5;
/// prio-fcfs "misses the interactive SLO" when its interactive TTFT p99 is
/// above this many times the interactive TTFT bound.
inline constexpr double shape_prio_miss_factor = 2.0;

/// One cell: every mode on the same requests at one load under one device.
struct shape_cell {
  workload_shape shape = workload_shape::conv;
  double load = 0;         ///< requested
  double offered_load = 0; ///< as measured on the scaled arrivals
  backends::transfer_overlap device = backends::transfer_overlap::full;
  std::vector<mode_summary> modes;
  std::vector<target_check> targets;
};

/// A shape's requests, as the first load's report context states them
/// (counts and means do not depend on the load).
struct shape_workload {
  workload_shape shape = workload_shape::conv;
  report_context ctx;
};

struct shapes_report {
  report_context ctx; ///< the invocation: command line, profile, SLOs, time scale, path
  std::vector<double> loads;
  std::vector<backends::transfer_overlap> devices;
  std::vector<shape_workload> shapes;
  std::vector<shape_cell> cells; ///< shape-major, then load, then device
};

/// The cell's targets (above) for `modes` under `slo`. A target whose modes
/// did not run is not evaluated; the TTFT target is not evaluated where
/// prio-fcfs meets its interactive SLO within 2x, or has no interactive request.
std::vector<target_check> shape_targets(const std::vector<mode_summary>& modes,
                                        const slo_set& slo);

/// One target over the grid.
struct target_tally {
  std::string id;
  std::string description; ///< the first cell's, without its cell-specific part
  std::size_t cells = 0, passed = 0, failed = 0, not_evaluated = 0;
  /// The evaluated cell furthest on the wrong side (the lowest value of an
  /// at-least target, the highest of an at-most one); -1 without one.
  std::ptrdiff_t worst_cell = -1;
};

/// Per target id, in the order the cells list them.
std::vector<target_tally> tally_targets(const std::vector<shape_cell>& cells);

/// "conv, load 1.0, shared": names a cell.
std::string cell_name(const shape_cell& c);

/// What is printed when a cell has run: its per-mode figures and targets.
std::string format_cell(const shape_cell& c);

/// The grid: one row per cell with the two ratios, failures and verdicts,
/// then one summary line per target.
std::string format_grid(const shapes_report& r);

/// The whole grid as JSON (docs/benchmarks.md, "Workload shapes").
nlohmann::ordered_json shapes_json(const shapes_report& r);

/// The chart: per shape, overlap / best other goodput and overlap / prio-fcfs
/// interactive TTFT p99 against load, one line per device, the target as a line.
plot_page shapes_plot(const shapes_report& r);

} // namespace kvlane::tools::bench
