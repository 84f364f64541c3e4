#pragma once

// kvlane::tools::bench — bench_workload: the requests of one invocation.
//
// Problem it solves: every mode, path and sweep point of an invocation must
// replay the same requests: read from the trace (or drawn, seeded), clamped to
// the model's context, marked interactive by a seeded draw, then scaled to
// the offered load asked for (--load, 1.0 for a trace by default) or by
// --rate-scale. Built once, here, with the figures the report states about it.
//
// Threading: plain functions over values.

#include "common/expected.hpp"
#include "tools/bench/bench_options.hpp"
#include "tools/bench/bench_profile.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/workload.hpp"

#include <optional>
#include <vector>

namespace kvlane::tools::bench {

struct bench_workload {
  std::vector<trace_request> base; ///< clamped and marked, arrivals as read or drawn
  work_model wm;                   ///< capacity figures of the driven model
  std::optional<double> main_load; ///< the load of the main comparison, if scaled to one
  std::optional<double> rate_scale; ///< --rate-scale (without a load)
  std::vector<trace_request> main; ///< base at main_load (or rate_scale)

  /// `base` with its arrivals scaled to `load` (by rate_scale when nullopt);
  /// `factor` receives the arrival time multiplier applied.
  std::vector<trace_request> at_load(std::optional<double> load, double& factor) const;
};

/// Builds the workload of `o` for `setup` and fills the workload fields of
/// `ctx` (source, counts, load, capacity, means). A trace that cannot be read
/// fails with exit code no_input, a bad row with data_error.
expected<bench_workload, bench_failure> prepare_workload(const bench_options& o,
                                                         const bench_setup& setup,
                                                         report_context& ctx);

} // namespace kvlane::tools::bench
