#pragma once

// kvlane::tools::bench — split_report: the figures of a two-model store split run.
//
// Problem it solves: --store-split runs the same requests on two models that
// share one snapshot store, once per way of sharing it (store_split), and
// each run must be read per model and for both together, the same way a
// --reuse run is read (reuse_summary): reuse against what an unlimited cache
// would reuse, TTFT of the requests with a reusable prefix, transfers, the
// store bytes each model held at its highest.
//
// Retained evictions are the store's own counts (store_stats::models), per
// model and for both: exact, including evictions that the other model's
// reservations made and the owner never noticed.
//
// Threading: plain functions over values.

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/reuse_report.hpp"
#include "tools/bench/store_split.hpp"
#include "tools/bench/workload.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

/// One model of a split run (figures in `figures`, its policy field = the model name).
struct split_model {
  reuse_summary figures;
  std::size_t requests = 0;
  std::size_t conversations = 0;
  double offered_load = 0; ///< of its requests, against one model's capacity
  std::uint64_t floor_bytes = 0, cap_bytes = 0; ///< as configured (0 = none)
};

/// One way of sharing the store.
struct split_summary {
  store_split split = store_split::shared;
  std::vector<split_model> models;   ///< in model order
  reuse_summary total;               ///< both models together; peak store bytes of the store
};

/// Reads `r`, the run of `requests` (trace_request::model says whose) on the
/// models of `cfg` (as split_config made it), as `split`. `wm` gives the
/// offered load of each model's requests.
split_summary summarize_split(store_split split, const run_result& r,
                              std::span<const trace_request> requests,
                              const daemon::config& cfg, const work_model& wm);

/// `shared` against `static` on the figures the comparison is about:
/// reused tokens, reusable TTFT p50, TTFT p50, output tokens/s (value of
/// shared / value of static; NaN when either is missing or zero).
struct split_ratios {
  double reused_tokens = 0;
  double ttft_p50_reusable = 0;
  double ttft_p50 = 0;
  double throughput = 0;
};
split_ratios shared_vs_static(const split_summary& shared, const split_summary& fixed);

/// The table: for each split, one column per model and one for both; then
/// the ratios of shared against static when both ran.
std::string format_split(const std::vector<split_summary>& runs);

} // namespace kvlane::tools::bench
