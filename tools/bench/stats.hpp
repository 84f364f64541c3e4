#pragma once

// kvlane::tools::bench — stats: percentiles and CDFs of latency samples.
//
// Percentiles interpolate linearly between the two closest ranks (the
// "linear" method of numpy and R's type 7): p-th percentile of n sorted
// samples x[0..n-1] is x at fractional index (n - 1) * p / 100. An empty
// sample set has no percentile (NaN), which the JSON writer prints as null.
//
// Threading: plain functions over values.

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace kvlane::tools::bench {

/// The p-th percentile (0..100) of `samples`; NaN when empty.
double percentile(std::span<const double> samples, double p);

/// The p-th percentile of samples already sorted ascending.
double percentile_sorted(std::span<const double> sorted, double p);

/// Mean of `samples`; NaN when empty.
double mean(std::span<const double> samples);

/// An empirical CDF as (value, fraction <= value) points, ascending, thinned
/// to at most `max_points` (always keeping the first and the last sample).
std::vector<std::pair<double, double>> cdf(std::span<const double> samples,
                                           std::size_t max_points = 200);

} // namespace kvlane::tools::bench
