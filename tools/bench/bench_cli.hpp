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
// Threading: bench_main runs on the caller's thread and blocks until done.

#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "tools/bench/workload.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

enum class bench_path : std::uint8_t { inproc, ipc, both };

struct bench_options {
  std::string trace_path;
  bool synthetic = false;
  synthetic_options synth;
  std::size_t requests = 200;         ///< 0 = every row of the trace
  std::optional<double> load;         ///< offered load as a fraction of capacity
  std::optional<double> rate_scale;   ///< arrival rate multiplier (exclusive with load)
  double interactive_share = 0.2;
  std::vector<actors::scheduler_mode> modes{actors::scheduler_mode::fcfs,
                                            actors::scheduler_mode::sync,
                                            actors::scheduler_mode::overlap,
                                            actors::scheduler_mode::ideal};
  bool modes_given = false;
  std::optional<double> time_scale;
  std::optional<backends::transfer_overlap> sim_overlap;
  bench_path path = bench_path::inproc;
  std::string kvlaned_path;           ///< --path ipc/both; empty = next to this program
  std::string config_path;            ///< empty = the built-in bench profile
  std::string model;                  ///< empty = the first model
  std::string json_out;
  std::string plot_out;
  std::uint64_t seed = 1;
  std::vector<double> sweep_loads;
  bool sweep_quantum = false;
  double timeout_s = 0;               ///< per run; 0 = automatic
  std::string log_level = "warn";
  bool timeline = false;              ///< gauge timelines in the JSON
  bool quiet = false;
  bool help = false;
  bool print_profile = false;         ///< print the built-in profile and exit
  std::string command_line;           ///< as invoked, shell-quoted
};

/// Parses the arguments after the program name. Errors name the flag.
expected<bench_options, std::string> parse_args(std::span<const std::string_view> args);

/// The usage text.
std::string_view usage() noexcept;

/// The built-in bench profile (TOML) and its parsed form.
std::string_view builtin_profile_toml() noexcept;
expected<daemon::config, std::string> builtin_profile();

/// Runs the benchmark; returns the process exit code (0 when it ran, whatever
/// the targets say; 64 usage, 66 missing input, 69 unavailable, 78 config, 1 other).
int run_bench(const bench_options& opts);

/// main(): parse, then run.
int bench_main(int argc, char** argv);

} // namespace kvlane::tools::bench
