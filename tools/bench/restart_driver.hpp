#pragma once

// kvlane::tools::bench — restart_driver: replays a conversation workload
// through real kvlaned children with a restart or a model swap half way.
//
// Problem it solves: "the KV survives a restart" is a claim about what the
// next turns of running conversations see, so it has to be measured on the
// same requests with and without the event, through the whole path (a real
// daemon, the client library, the store handed over or read back). One run:
//
// 1. kvlaned starts under the service host (service_host: this program plays
//    systemd's side: NOTIFY_SOCKET, read all along, and the fd store) in a
//    fresh directory.
// 2. The first half of the requests (in arrival order) is sent at their trace
//    times, causal turns held for their previous turn (turn_gate). Then no
//    new turn is sent and the ones in flight finish: a graceful restart, as
//    an admin would drain first.
// 3. The half-way event: none (the baseline pauses all the same); fd_store:
//    SIGTERM, the stop hands the store to the fd store, a new kvlaned gets
//    it back; disk: the same with the disk tier configured and nothing
//    handed over; swap: two models with [models] max_loaded = 1, a request to
//    the second one unloads the driven one (its KV parked in the store), and
//    the driven model's next turn loads it again.
// 4. The second half follows at its trace times shifted by the part of the
//    pause that ran past the next request's trace time, so that no turn is
//    sent earlier or later relative to the others than in the baseline.
//
// The scheduler's counters start at zero with each daemon and each load of
// a model, so they are read at the end of each segment and added up. Times
// are measured here, on the wall clock, and scaled to simulated ms like the
// other drivers' (TTFT from each request's submit).
//
// Threading: run_restart blocks the calling thread for the whole run;
// request callbacks run on the connections' reader threads and only record.

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/restart_variant.hpp"

#include "common/expected.hpp"

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

namespace kvlane::tools::bench {

struct restart_run_options {
  run_options run;          ///< configuration (one model), model, time_scale, timeout, progress
  std::string kvlaned_path; ///< the daemon binary
  std::string log_level = "warn"; ///< the daemon's loggers ("daemon" and "store" stay at info)
  std::chrono::milliseconds ready_timeout{30000}; ///< start to READY=1, at most
  std::chrono::milliseconds stop_timeout{60000};  ///< SIGTERM to exit, at most
};

/// The disk tier's write-back as the first kvlaned logged it at its stop.
struct disk_writeback {
  std::uint64_t snapshots = 0;
  double mib = 0;       ///< whole MiB, as logged
  double seconds = 0;   ///< writing them, pacing and fsyncs included
  double mib_per_s = 0; ///< as logged (rounded to a whole MiB/s)
};

/// What the half-way event cost. Wall ms unless said otherwise; NaN: does
/// not apply to this run.
struct restart_figures {
  static constexpr double none = std::numeric_limits<double>::quiet_NaN();
  std::size_t half = 0;        ///< requests sent before the event
  double half_way_s = 0;       ///< trace time of the first request after it (simulated s)
  double drain_ms = none;      ///< the last first-half request sent to the last one ended
  double event_ms = none;      ///< drained to serving again (the restart or the swap itself)
  double shift_ms = 0;         ///< how far the rest of the schedule moved
  double stop_ms = none;       ///< SIGTERM to the old kvlaned's exit
  double restart_to_ready_ms = none; ///< SIGTERM to READY=1 of the new kvlaned
  double start_to_ready_ms = none;   ///< the new process's start to its READY=1
  double first_ttft_ms = none; ///< the first request after the event: submit to first token
  double swap_ms = none;       ///< the other model's request: submit to end (unload and load)
  std::uint64_t restored_snapshots = 0; ///< kvlane_store_restored_snapshots_total after a restart
  std::uint64_t disk_only_snapshots = 0; ///< on disk only after a restart (disk tier)
  std::uint64_t disk_reads = 0, disk_read_bytes = 0; ///< read back from the disk tier after it
  std::optional<disk_writeback> writeback; ///< disk: the first kvlaned's, from its stop log
};

struct restart_result {
  restart_kind kind = restart_kind::none;
  run_result run; ///< wall_ms is the schedule's: the shift is taken out
  restart_figures figures;
};

/// Runs `requests` (in arrival order) in `mode` with `kind` half way. Fails
/// if a daemon cannot be started, reached or stopped cleanly (exit 0), or the
/// event did not happen (nothing handed to the fd store, the swap did not
/// unload the driven model); request failures are outcomes.
expected<restart_result, std::string> run_restart(const restart_run_options& opts,
                                                  actors::scheduler_mode mode, restart_kind kind,
                                                  std::span<const trace_request> requests);

/// The disk lane's stop line in a kvlaned log ("disk tier: N snapshots
/// written back (M MiB in S s, R MiB/s), ..."), the last one if several.
std::optional<disk_writeback> parse_disk_writeback(std::string_view log);

/// The name of the second model of a swap run: `<model>-b`.
std::string swap_model_name(std::string_view model);

} // namespace kvlane::tools::bench
