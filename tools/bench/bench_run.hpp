#pragma once

// kvlane::tools::bench — bench_run: runs every mode of an invocation.
//
// Problem it solves: the comparison holds on a noisy machine only if every
// mode replays the same workload back to back on a fresh serving core: in
// process (run_mode), through a kvlaned child (run_mode_ipc), or both, one
// after the other per mode so that both see the same machine state. Also the
// sweeps: every mode at each --sweep load, or the scheduler quantum halved
// until a mode preempts at least once per slot per simulated second. Returns
// the report's figures, ratios and targets; the caller adds the context.
//
// Threading: blocks the calling thread for every run, one after the other.

#include "common/expected.hpp"
#include "tools/bench/bench_options.hpp"
#include "tools/bench/bench_profile.hpp"
#include "tools/bench/bench_workload.hpp"
#include "tools/bench/report.hpp"

#include <functional>
#include <string>
#include <string_view>

namespace kvlane::tools::bench {

struct bench_run_options {
  std::string kvlaned_path; ///< --path ipc or both: the daemon to start
  std::function<void(std::string_view)> progress; ///< one line per event; may be empty
};

/// Runs `o.modes` on `o.path` for the main comparison, the load sweep or the
/// quantum sweep. Fails with the first run that could not be carried out
/// (request failures are figures, not failures).
expected<bench_report, std::string> run_benchmark(const bench_options& o, const bench_setup& setup,
                                                  const bench_workload& w,
                                                  const bench_run_options& run);

} // namespace kvlane::tools::bench
