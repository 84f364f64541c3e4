#include "tools/bench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvlane::tools::bench {

double percentile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty())
    return std::numeric_limits<double>::quiet_NaN();
  p = std::clamp(p, 0.0, 100.0);
  const double index = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(index));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = index - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double percentile(std::span<const double> samples, double p) {
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  return percentile_sorted(sorted, p);
}

double mean(std::span<const double> samples) {
  if (samples.empty())
    return std::numeric_limits<double>::quiet_NaN();
  return std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
}

std::vector<std::pair<double, double>> cdf(std::span<const double> samples,
                                           std::size_t max_points) {
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<double, double>> out;
  const auto n = sorted.size();
  if (n == 0)
    return out;
  max_points = std::max<std::size_t>(max_points, 2);
  const std::size_t stride = (n + max_points - 2) / (max_points - 1);
  for (std::size_t i = 0; i < n; i += std::max<std::size_t>(stride, 1))
    out.emplace_back(sorted[i], static_cast<double>(i + 1) / static_cast<double>(n));
  if (out.back().second < 1.0)
    out.emplace_back(sorted.back(), 1.0);
  return out;
}

} // namespace kvlane::tools::bench
