#include "rss_trend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace kvlane::tools::soak {

namespace {

constexpr double mib = 1024.0 * 1024.0;

// Pairs grow with the square of the samples: thin the half to this many
// (evenly) so that a long soak's verdict stays cheap (~80k slopes).
constexpr std::size_t max_slope_samples = 400;

double theil_sen_slope(std::span<const rss_sample> s) {
  std::vector<rss_sample> thin;
  if (s.size() > max_slope_samples) {
    thin.reserve(max_slope_samples);
    for (std::size_t i = 0; i < max_slope_samples; ++i)
      thin.push_back(s[i * (s.size() - 1) / (max_slope_samples - 1)]);
    s = thin;
  }
  std::vector<double> slopes;
  slopes.reserve(s.size() * (s.size() - 1) / 2);
  for (std::size_t i = 0; i < s.size(); ++i)
    for (std::size_t j = i + 1; j < s.size(); ++j) {
      const double dt = s[j].t_s - s[i].t_s;
      if (dt == 0)
        continue;
      slopes.push_back((static_cast<double>(s[j].bytes) - static_cast<double>(s[i].bytes)) / dt);
    }
  if (slopes.empty())
    return 0;
  const auto mid = slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2);
  std::nth_element(slopes.begin(), mid, slopes.end());
  if (slopes.size() % 2 == 1)
    return *mid;
  const double upper = *mid;
  const double lower = *std::max_element(slopes.begin(), mid);
  return (lower + upper) / 2;
}

std::uint64_t max_in(std::span<const rss_sample> s, double from_s, double to_s) {
  std::uint64_t m = 0;
  for (const auto& x : s)
    if (x.t_s >= from_s && x.t_s <= to_s)
      m = std::max(m, x.bytes);
  return m;
}

} // namespace

rss_trend judge_rss_trend(std::span<const rss_sample> samples, const rss_trend_limits& limits) {
  rss_trend r;
  r.samples = samples.size();
  if (samples.empty())
    return r;
  r.first_bytes = samples.front().bytes;
  r.last_bytes = samples.back().bytes;
  for (const auto& s : samples)
    r.max_bytes = std::max(r.max_bytes, s.bytes);
  const double t0 = samples.front().t_s;
  const double t1 = samples.back().t_s;
  r.span_s = t1 - t0;
  const double mid = t0 + r.span_s / 2;
  r.second_quarter_max = max_in(samples, t0 + r.span_s / 4, mid);
  r.last_quarter_max = max_in(samples, t0 + r.span_s * 3 / 4, t1);

  const auto half_begin = std::find_if(samples.begin(), samples.end(),
                                       [&](const rss_sample& s) { return s.t_s >= mid; });
  const std::span<const rss_sample> half{half_begin, samples.end()};
  if (half.size() < std::max<std::size_t>(limits.min_half_samples, 2))
    return r;

  std::vector<std::uint64_t> bytes;
  bytes.reserve(half.size());
  for (const auto& s : half)
    bytes.push_back(s.bytes);
  std::nth_element(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2),
                   bytes.end());
  r.half_median = bytes[bytes.size() / 2];

  r.slope_bytes_per_s = theil_sen_slope(half);
  r.half_growth_bytes = r.slope_bytes_per_s * (half.back().t_s - half.front().t_s);
  r.tolerance_bytes = std::max(static_cast<double>(limits.min_growth_bytes),
                               limits.growth_fraction * static_cast<double>(r.half_median));
  r.result = r.half_growth_bytes > r.tolerance_bytes ? rss_trend::verdict::growing
                                                     : rss_trend::verdict::plateau;
  return r;
}

const char* to_string(rss_trend::verdict v) noexcept {
  switch (v) {
  case rss_trend::verdict::plateau:
    return "plateau";
  case rss_trend::verdict::growing:
    return "GROWING";
  case rss_trend::verdict::too_few_samples:
    return "TOO FEW SAMPLES";
  }
  return "?";
}

std::string to_string(const rss_trend& t) {
  return fmt::format("rss {} samples over {:.0f} s: {:.1f} -> {:.1f} MiB (max {:.1f}); second half: "
                     "median {:.1f}, quarter maxima {:.1f} -> {:.1f}, trend {:+.2f} MiB/min = "
                     "{:+.2f} MiB over the half (tolerance {:.2f}): {}",
                     t.samples, t.span_s, static_cast<double>(t.first_bytes) / mib,
                     static_cast<double>(t.last_bytes) / mib, static_cast<double>(t.max_bytes) / mib,
                     static_cast<double>(t.half_median) / mib,
                     static_cast<double>(t.second_quarter_max) / mib,
                     static_cast<double>(t.last_quarter_max) / mib,
                     t.slope_bytes_per_s * 60 / mib, t.half_growth_bytes / mib,
                     t.tolerance_bytes / mib, to_string(t.result));
}

} // namespace kvlane::tools::soak
