#pragma once

// kvlane::tools::bench — bench_cli: the kvlane-bench program.
//
// Problem it solves: one invocation replays the same workload (a request
// trace or a synthetic Poisson mix, same seed) against every requested
// scheduling mode, one after another on a fresh serving core each, so the
// comparison holds on a noisy machine: an in-process engine (--path inproc),
// a real kvlaned child driven through the client library (--path ipc), or
// both, one after the other per mode, with the IPC/in-process throughput
// ratio (--path both). Prints a table, ratios and the project's targets;
// writes JSON and a gnuplot PNG. Also sweeps the offered load (--sweep) or
// the scheduler's quantum (--sweep-quantum).
//
// The steps, one file pair each: bench_options (command line), bench_profile
// (configuration), bench_workload (requests), bench_run (the runs), report
// (figures and table), report_json, report_plot (+ plot).
//
// --restart (restart_run): the same conversation replay through kvlaned
// children with a restart or a model swap half way, against a baseline.
//
// Over HTTP (race_run): --path http drives one running OpenAI-compatible
// server; --race-llama races kvlaned against llama-server on one GGUF.
//
// Threading: bench_main runs on the caller's thread and blocks until done.

#include "tools/bench/bench_options.hpp"

namespace kvlane::tools::bench {

/// Runs the benchmark; returns the process exit code (0 when it ran, whatever
/// the targets say; 64 usage, 66 missing input, 69 unavailable, 78 config, 1 other).
int run_bench(const bench_options& opts);

/// main(): parse, then run.
int bench_main(int argc, char** argv);

} // namespace kvlane::tools::bench
