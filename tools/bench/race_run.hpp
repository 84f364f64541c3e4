#pragma once

// kvlane::tools::bench — race_run: kvlane-bench over HTTP (--path http, --race-llama).
//
// Problem it solves: ties the HTTP pieces into the two programs the command
// line asks for. `--path http` replays the workload of the usual flags
// against one running server and prints its figures. `--race-llama` races
// kvlaned against llama-server: per workload (decode, prefill, azure,
// mooncake, in that order) it starts each server in turn on the same GGUF and
// settings (race_server: a fresh process, so no cache carries over from one
// workload to the next), sends one unmeasured warm-up request, replays the
// workload (http_driver), stops the server, and reduces the run
// (race_summary). The one-stream workloads (decode, prefill) run in rounds,
// one request per server start, the servers alternating: a machine busy with
// something else for a while then slows both sides alike. The trace workloads' arrivals are scaled to --load against
// the capacity the first server's one-stream decode and prefill speeds imply
// (measured by the decode and prefill workloads, or by a short unreported
// calibration when those are not raced). Then the side-by-side report, the
// targets and the JSON (race_report). Servers are stopped on every path out.
//
// Threading: blocks the calling thread, which must outlive the servers it
// starts (it does: they are stopped before these return).

#include "tools/bench/bench_options.hpp"

namespace kvlane::tools::bench {

/// --path http: returns kvlane-bench's exit code.
int run_http_path(const bench_options& o);

/// --race-llama: returns kvlane-bench's exit code (0 when the runs
/// completed, whatever the targets say).
int run_race(const bench_options& o);

} // namespace kvlane::tools::bench
