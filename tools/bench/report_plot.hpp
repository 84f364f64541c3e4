#pragma once

// kvlane::tools::bench — report_plot: the charts of a benchmark report.
//
// Problem it solves: the figures read best as curves; this lays a report out
// as a plot_page for plot::render: for a comparison, the TTFT CDF per mode,
// output tokens/s and interactive TTFT p99 per mode (plus TTFT p99 against
// the offered load after a load sweep); for a quantum sweep, output tokens/s
// against preemptions per second and against the quantum.
//
// Threading: plain functions over values.

#include "daemon/config.hpp"
#include "tools/bench/plot.hpp"
#include "tools/bench/report.hpp"

#include <span>

namespace kvlane::tools::bench {

/// The page for `r`; `modes` orders the curves of the sweeps.
plot_page report_plot(const bench_report& r, std::span<const actors::scheduler_mode> modes);

} // namespace kvlane::tools::bench
