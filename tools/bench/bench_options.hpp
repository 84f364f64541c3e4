#pragma once

// kvlane::tools::bench — bench_options: the command line of kvlane-bench.
//
// Problem it solves: one place that knows every flag, its default, its range
// and which flags exclude each other, so that a bad invocation stops before
// anything runs with a message that names the flag (docs/benchmarks.md lists
// the same flags).
//
// Threading: plain functions over values.

#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "tools/bench/conversation_workload.hpp"
#include "tools/bench/race_options.hpp"
#include "tools/bench/restart_variant.hpp"
#include "tools/bench/reuse_variant.hpp"
#include "tools/bench/slo.hpp"
#include "tools/bench/store_split.hpp"
#include "tools/bench/workload.hpp"
#include "tools/bench/workload_shape.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// inproc: the in-process engine; ipc: a kvlaned child through the client
/// library; both: one then the other; http: a running server over its
/// OpenAI API (http_driver, race_options).
enum class bench_path : std::uint8_t { inproc, ipc, both, http };

struct bench_options {
  std::string trace_path;
  bool synthetic = false;
  double input_scale = 1.0;           ///< multiplies prompt lengths (and a Mooncake block)
  bool input_scale_given = false;
  double sample_conversations = 1.0;  ///< Mooncake: share of conversations kept, seeded
  bool sample_given = false;
  /// Mooncake: after sampling, keep only the first N requests of the sample
  /// (0 = all); --shapes sets it from --requests, which then reads every row.
  std::size_t keep_requests = 0;
  trace_users users = trace_users::conversation; ///< Mooncake: who sends each conversation
  /// Mooncake: a turn is not sent before the previous turn of its
  /// conversation has ended (--turns causal, the default) or goes at its
  /// trace time regardless (--turns open).
  bool causal_turns = true;
  /// --reuse: the reuse policies compared (instead of the modes), in order.
  std::vector<reuse_variant> reuse;
  /// --store-split: two models from the profile's model share the store; the
  /// variants compared (shared elastic pool, static halves), in order.
  std::vector<store_split> store_splits;
  double burst_s = 300;               ///< --store-split: simulated seconds per model's turn
  /// --restart: the half-way events compared with a run without one (the
  /// baseline, always run first), in order, through kvlaned children.
  std::vector<restart_kind> restarts;
  synthetic_options synth;
  std::size_t requests = 200;         ///< 0 = every row of the trace
  std::optional<double> load;         ///< offered load as a fraction of capacity
  std::optional<double> rate_scale;   ///< arrival rate multiplier (exclusive with load)
  double interactive_share = 0.2;
  std::vector<actors::scheduler_mode> modes{std::begin(actors::all_scheduler_modes),
                                            std::end(actors::all_scheduler_modes)};
  bool modes_given = false;
  std::optional<double> time_scale;
  std::optional<backends::transfer_overlap> sim_overlap;
  std::optional<std::uint64_t> snapshot_bytes;  ///< sim: [model.sim] snapshot_bytes
  std::optional<std::uint64_t> store_bytes;     ///< [store] max_bytes
  std::optional<std::uint64_t> warm_pool_bytes; ///< [store] warm_pool_bytes
  bool prefault_warm_pool = false;              ///< [store] prefault_warm_pool = true
  /// --devices: the comparison once per sim overlap assumption, side by side.
  std::vector<backends::transfer_overlap> devices;
  slo_set slo;                        ///< per-class SLOs for goodput
  bool slo_given = false;             ///< an --slo-* flag replaced a default
  bench_path path = bench_path::inproc;
  std::string kvlaned_path;           ///< --path ipc/both; empty = next to this program
  std::string config_path;            ///< empty = the built-in bench profile
  std::string model;                  ///< empty = the first model
  std::string json_out;
  std::string plot_out;
  std::uint64_t seed = 1;
  std::vector<double> sweep_loads;
  bool sweep_quantum = false;
  /// --shapes: the grid of workload shapes x loads (--sweep) x devices
  /// (--devices), every mode in each cell (shape_run).
  std::vector<workload_shape> shapes;
  double timeout_s = 0;               ///< per run; 0 = automatic
  std::string log_level = "warn";
  bool timeline = false;              ///< gauge timelines in the JSON
  bool quiet = false;
  bool help = false;
  bool print_profile = false;         ///< print the built-in profile and exit
  std::string command_line;           ///< as invoked, shell-quoted
  /// --path http and --race-llama (race_options).
  race_options race;
};

/// The exit codes of kvlane-bench (sysexits.h): 0 when it ran, whatever the
/// targets say.
namespace exit_code {
constexpr int other = 1, usage = 64, data_error = 65, no_input = 66, unavailable = 69,
              config = 78;
} // namespace exit_code

/// Why kvlane-bench cannot go on, and the exit code that says so.
struct bench_failure {
  int exit_code = exit_code::other;
  std::string message;
};

/// True when `path` names a Mooncake conversation trace (.jsonl); any other
/// trace is read as the Azure CSV format.
bool is_mooncake_trace(std::string_view path) noexcept;

/// Parses the arguments after the program name. Errors name the flag.
expected<bench_options, std::string> parse_args(std::span<const std::string_view> args);

/// The usage text.
std::string_view usage() noexcept;

} // namespace kvlane::tools::bench
