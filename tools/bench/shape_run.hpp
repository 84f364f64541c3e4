#pragma once

// kvlane::tools::bench — shape_run: runs the grid of workload shapes (--shapes).
//
// Problem it solves: `make bench-shapes` must run every mode in every cell of
// shapes x loads x device models, with the same requests for every mode (and
// device) of a shape at one load, in one process that prints each cell as it
// ends and the grid at the end. Each shape becomes the options that build its
// requests (a trace, or a synthetic mix), prepare_workload builds them once
// per load, and run_benchmark runs the modes under every device assumption,
// as `make bench` does at one point.
//
// Threading: blocks the calling thread for every run, one after the other.

#include "common/expected.hpp"
#include "tools/bench/bench_options.hpp"
#include "tools/bench/bench_profile.hpp"
#include "tools/bench/bench_run.hpp"
#include "tools/bench/shape_report.hpp"

#include <functional>

namespace kvlane::tools::bench {

/// The options that build `shape`'s requests at `load`: `o` (modes, devices,
/// SLOs, seed, interactive share, --requests) with the shape's trace or
/// synthetic lengths, no sweep, and the load as the main load.
bench_options shape_options(const bench_options& o, workload_shape shape, double load);

/// The loads of the grid: --sweep, else --load, else 1.0.
std::vector<double> shape_loads(const bench_options& o);

/// Runs the grid of `o.shapes` on `setup`; `on_cell` sees each cell as it
/// ends (may be empty). A trace that cannot be read fails with its exit code
/// (no_input, data_error); a run that cannot be carried out with `other`.
expected<shapes_report, bench_failure>
run_shapes(const bench_options& o, const bench_setup& setup, const bench_run_options& run,
           const std::function<void(const shape_cell&)>& on_cell);

} // namespace kvlane::tools::bench
