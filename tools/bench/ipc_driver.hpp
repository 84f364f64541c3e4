#pragma once

// kvlane::tools::bench — ipc_driver: replays a workload through a real kvlaned.
//
// Problem it solves: the in-process runner measures the serving core alone;
// apps reach it through a separate daemon process, the client library and
// shared-memory rings. run_mode_ipc measures that whole path with the same
// workload, clocks and figures as run_mode: for one mode it writes the run's
// configuration as a kvlane.toml (config_toml) into a fresh temporary
// directory with runtime_dir inside it, starts kvlaned as a child process
// (common/child_process), waits for its "ready:" line on the child's output,
// connects with the client library, submits every request at its arrival
// time (simulated seconds / time_scale of wall time) with a callback, and
// times each request in this process as its tokens arrive. The scheduler's
// counters come from the daemon's admin socket (tools/admin_connection:
// `status`, read by admin_status, and `metrics` for dumps and loads), its
// gauges from `status` every ~100 ms of wall time, the store's peaks from the
// last `status` (run_result::store_peaks_known = false when the daemon does
// not report them, instead of an estimate). The daemon is stopped with
// SIGTERM (again if it lingers) and must exit 0.
//
// Connections: one per request class (interactive, batch), both named
// "bench". A connection runs one reader thread, so this keeps the bench's
// own CPU use fixed (two readers) whatever the number of requests, on a
// machine whose cores the daemon needs; [clients] max_requests is raised to
// cover every request of the run on one connection.
//
// Threading: run_mode_ipc blocks the calling thread for the whole run;
// request callbacks run on the connections' reader threads and only record.

#include "tools/bench/bench_runner.hpp"

#include "common/expected.hpp"
#include "daemon/config.hpp"

#include <chrono>
#include <span>
#include <string>

namespace kvlane::tools::bench {

struct ipc_run_options {
  run_options run;           ///< configuration, model, time_scale, timeout, progress
  std::string kvlaned_path;  ///< the daemon binary
  std::string log_level = "warn"; ///< the daemon's loggers ("daemon" stays at info for "ready:")
  bool transfers_overlap = true;  ///< the backend can run a transfer alongside a step
  std::chrono::milliseconds ready_timeout{20000}; ///< start-up bound
};

/// The kvlaned next to the running program (/proc/self/exe), or "" if unknown.
std::string default_kvlaned_path();

/// Runs `requests` (in arrival order) through a fresh kvlaned in `mode`.
/// Fails if the daemon cannot be started, reached or stopped cleanly (exit
/// 0); request failures are outcomes.
expected<run_result, std::string> run_mode_ipc(const ipc_run_options& opts,
                                               actors::scheduler_mode mode,
                                               std::span<const trace_request> requests);

} // namespace kvlane::tools::bench
