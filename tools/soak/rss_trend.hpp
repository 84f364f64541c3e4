#pragma once

// kvlane::tools::soak — rss_trend: does a process's RSS still grow at the end
// of a soak, or has it levelled off?
//
// Problem it solves: a daemon's RSS rises at first whatever it does (allocator
// arenas, thread caches, warm pools and tables reaching their working size),
// so "RSS at the end minus RSS at the start" cannot tell a plateau from a
// leak. A leak keeps growing; a plateau does not. The soak samples the RSS
// through its run and judges only the second half, by the Theil–Sen slope
// (the median of the slopes between every pair of samples), which ignores
// up to ~29% outliers: a transient burst of allocations, or the allocator
// handing pages back, moves it little, while steady growth moves it fully.
// The growth that slope projects over the second half must stay within a
// tolerance: max(min_growth_bytes, growth_fraction × the half's median RSS).
//
// Threading: plain functions over values.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvlane::tools::soak {

struct rss_sample {
  double t_s = 0;          ///< seconds since the run started
  std::uint64_t bytes = 0; ///< resident set size
};

struct rss_trend_limits {
  /// Growth over the second half always allowed (allocator granularity). A
  /// plateau's trend is within ±0.1 MiB; the session leak this criterion was
  /// made for grew 1.4 MiB over the half of a 60-second soak.
  std::uint64_t min_growth_bytes = 1ull << 20;
  /// Growth over the second half allowed relative to its median RSS.
  double growth_fraction = 0.03;
  /// Fewer samples than this in the second half give no verdict (a failure).
  std::size_t min_half_samples = 8;
};

struct rss_trend {
  enum class verdict { plateau, growing, too_few_samples };
  verdict result = verdict::too_few_samples;
  std::size_t samples = 0;
  double span_s = 0; ///< first to last sample
  std::uint64_t first_bytes = 0, last_bytes = 0, max_bytes = 0;
  std::uint64_t second_quarter_max = 0, last_quarter_max = 0; ///< for the summary
  std::uint64_t half_median = 0;     ///< median RSS of the second half
  double slope_bytes_per_s = 0;      ///< Theil–Sen slope over the second half
  double half_growth_bytes = 0;      ///< slope × the second half's span
  double tolerance_bytes = 0;

  bool ok() const noexcept { return result == verdict::plateau; }
};

/// Judges samples in time order (times strictly increasing are not required;
/// pairs with equal times are skipped). Pure: same samples, same verdict.
rss_trend judge_rss_trend(std::span<const rss_sample> samples, const rss_trend_limits& limits = {});

/// One line, e.g. "rss 120 samples over 59 s: 14.5 -> 16.1 MiB (max 16.3); second half:
/// median 15.9, quarter maxima 16.0 -> 16.3, trend +0.10 MiB/min = +0.05 MiB over the half
/// (tolerance 2.00): plateau".
std::string to_string(const rss_trend& t);

const char* to_string(rss_trend::verdict v) noexcept;

} // namespace kvlane::tools::soak
