#pragma once

// kvlane::tools::bench — bench_profile: the configuration a benchmark runs.
//
// Problem it solves: a benchmark must run on a stated configuration: the
// built-in bench profile (the sim's default device timing with small real
// snapshots, docs/benchmarks.md) or a kvlane.toml, reduced to the one model
// driven, with the sim overrides of the command line applied, checked against
// the modes asked for, and with the backend's figures (context, slots,
// capabilities) known before the workload is built.
//
// Threading: plain functions over values.

#include "backends/backend.hpp"
#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "tools/bench/bench_options.hpp"

#include <string>
#include <string_view>

namespace kvlane::tools::bench {

/// The built-in bench profile (TOML) and its parsed form.
std::string_view builtin_profile_toml() noexcept;
expected<daemon::config, std::string> builtin_profile();

/// The configuration of one invocation.
struct bench_setup {
  daemon::config cfg;          ///< with only the driven model, overrides applied
  std::string profile_source;  ///< "built-in bench profile" or the config path
  std::string profile_toml;    ///< the built-in profile's text (empty for a file)
  backends::backend_info info; ///< of the driven model's backend
  bool sim = false;            ///< the backend is the sim
  double time_scale = 1.0;     ///< simulated ms per wall ms (1 off the sim)

  const daemon::model_section& model() const { return cfg.models.front(); }
};

/// Loads the profile or --config, keeps the --model (default: the first),
/// applies --time-scale, --sim-overlap, --snapshot-bytes, --store-bytes and
/// --warm-pool-bytes (checked as the configuration would be), and loads the
/// backend once for its figures. Failures carry kvlane-bench's exit code (usage, config).
expected<bench_setup, bench_failure> load_setup(const bench_options& o);

} // namespace kvlane::tools::bench
