#pragma once

// kvlane::tools::bench — restart_run: the --restart step of kvlane-bench.
//
// Problem it solves: the restart comparison must replay the same requests
// back to back — the baseline first, then each event asked for (fdstore,
// disk, swap) — on the invocation's profile with conversation reuse through
// the store, each on fresh kvlaned children (restart_driver), and read every
// run against the baseline measured in the same invocation (restart_report).
// Returns the report (the usual context, each run's reuse figures, the
// targets) with the restart figures; bench_cli prints and writes them.
//
// Threading: blocks the calling thread for every run, one after the other.

#include "common/expected.hpp"
#include "tools/bench/bench_options.hpp"
#include "tools/bench/bench_profile.hpp"
#include "tools/bench/bench_run.hpp"
#include "tools/bench/bench_workload.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/restart_report.hpp"

#include <string>
#include <vector>

namespace kvlane::tools::bench {

struct restart_comparison {
  bench_report report;                ///< context, `modes` and `reuse` per run, targets
  std::vector<restart_summary> runs;  ///< baseline first, then --restart's order
  device_bandwidth device;
};

/// The store-reuse configuration every run of the step uses: `setup`'s, with
/// [reuse] mode = store.
daemon::config restart_profile(const bench_setup& setup);

/// Runs the baseline and every `o.restarts` event on `w.main` in
/// `o.modes.front()`. Fails with the first run that could not be carried out.
expected<restart_comparison, std::string> run_restarts(const bench_options& o,
                                                       const bench_setup& setup,
                                                       const bench_workload& w,
                                                       const bench_run_options& run);

/// What kvlane-bench prints for it: header, per-run reuse table, the
/// comparison with the targets side by side, the event times, the targets.
std::string format_restart_comparison(const restart_comparison& c);

/// The JSON document: the usual report with a top-level "restart" object.
std::string restart_comparison_json(const restart_comparison& c);

} // namespace kvlane::tools::bench
