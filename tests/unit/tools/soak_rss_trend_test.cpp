// The soak's memory criterion: RSS that levels off passes, RSS that still
// grows over the second half of the run fails, noise and bursts do not decide.
#include "tools/soak/rss_trend.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace kvlane::tools::soak;

namespace {

constexpr double mib = 1024.0 * 1024.0;

/// One sample every `step_s` over `seconds`, RSS in MiB from `f(t)`.
template <class F>
std::vector<rss_sample> sampled(double seconds, double step_s, F f) {
  std::vector<rss_sample> out;
  for (double t = 0; t <= seconds; t += step_s)
    out.push_back({t, static_cast<std::uint64_t>(std::max(0.0, f(t)) * mib)});
  return out;
}

/// A warm-up: from 14.5 MiB rising to 30 MiB within the first `ramp_s`, then flat.
double warm_then_flat(double t, double ramp_s) {
  return 14.5 + 15.5 * std::min(1.0, t / ramp_s);
}

} // namespace

TEST_CASE("rss_trend: a plateau after a warm-up in the first half passes") {
  const auto s = sampled(600, 1, [](double t) { return warm_then_flat(t, 200); });
  const auto sut = judge_rss_trend(s);
  CHECK(sut.result == rss_trend::verdict::plateau);
  CHECK(sut.ok());
  CHECK(sut.half_growth_bytes == doctest::Approx(0));
  CHECK(sut.first_bytes == static_cast<std::uint64_t>(14.5 * mib));
  CHECK(sut.max_bytes == static_cast<std::uint64_t>(30 * mib));
}

TEST_CASE("rss_trend: steady growth over the whole run fails, at the 10-minute soak's rate "
          "and at the 60-second soak's length") {
  // 14.5 to 47 MiB in 600 s: 3.25 MiB a minute (the finished sessions CAF kept).
  auto leak = [](double t) { return 14.5 + 32.5 * t / 600; };
  const auto ten_minutes = judge_rss_trend(sampled(600, 1, leak));
  CHECK(ten_minutes.result == rss_trend::verdict::growing);
  CHECK(ten_minutes.slope_bytes_per_s * 60 / mib == doctest::Approx(3.25).epsilon(0.01));
  CHECK(ten_minutes.half_growth_bytes / mib == doctest::Approx(16.25).epsilon(0.01));

  const auto one_minute = judge_rss_trend(sampled(60, 0.5, leak));
  CHECK(one_minute.result == rss_trend::verdict::growing);
  CHECK_FALSE(one_minute.ok());
}

TEST_CASE("rss_trend: a noisy plateau with bursts and trims passes") {
  std::mt19937_64 rng{20};
  std::normal_distribution<double> noise{0, 0.6};
  std::uniform_real_distribution<double> u{0, 1};
  auto noisy = [&](double t) {
    double v = warm_then_flat(t, 150) + noise(rng);
    const double r = u(rng);
    if (r < 0.08)
      v += 6; // a burst of allocations
    else if (r < 0.12)
      v -= 4; // the allocator trimmed
    return v;
  };
  auto s = sampled(600, 1, noisy);
  // The run's very last samples caught a burst: the maxima say "higher", the slope does not.
  for (std::size_t i = s.size() - 5; i < s.size(); ++i)
    s[i].bytes += static_cast<std::uint64_t>(8 * mib);
  const auto sut = judge_rss_trend(s);
  CHECK(sut.last_quarter_max > sut.second_quarter_max);
  CHECK(sut.result == rss_trend::verdict::plateau);
  CHECK(std::abs(sut.half_growth_bytes) < sut.tolerance_bytes / 2);
}

TEST_CASE("rss_trend: steady growth under the same noise still fails") {
  std::mt19937_64 rng{20};
  std::normal_distribution<double> noise{0, 0.6};
  std::uniform_real_distribution<double> u{0, 1};
  auto noisy_leak = [&](double t) {
    double v = 14.5 + 32.5 * t / 600 + noise(rng);
    if (u(rng) < 0.08)
      v += 6;
    return v;
  };
  const auto sut = judge_rss_trend(sampled(600, 1, noisy_leak));
  CHECK(sut.result == rss_trend::verdict::growing);
  CHECK(sut.slope_bytes_per_s * 60 / mib == doctest::Approx(3.25).epsilon(0.1));
}

TEST_CASE("rss_trend: growth within the tolerance passes, beyond it fails") {
  // 20 MiB median: 3% of it is 0.6 MiB, under the 1 MiB floor, so 1 MiB.
  auto growing_by = [](double half_growth_mib) {
    return sampled(100, 1, [=](double t) { return 20 + half_growth_mib * (t - 50) / 50; });
  };
  const auto within = judge_rss_trend(growing_by(0.9));
  CHECK(within.tolerance_bytes / mib == doctest::Approx(1.0));
  CHECK(within.result == rss_trend::verdict::plateau);
  CHECK(judge_rss_trend(growing_by(1.1)).result == rss_trend::verdict::growing);

  // At 100 MiB the fraction decides: 3 MiB.
  rss_trend_limits limits;
  const auto big = sampled(100, 1, [](double t) { return 100 + 2.5 * (t - 50) / 50; });
  CHECK(judge_rss_trend(big, limits).tolerance_bytes / mib == doctest::Approx(3.0).epsilon(0.01));
  CHECK(judge_rss_trend(big, limits).result == rss_trend::verdict::plateau);
  limits.growth_fraction = 0.02;
  CHECK(judge_rss_trend(big, limits).result == rss_trend::verdict::growing);
}

TEST_CASE("rss_trend: too few samples in the second half give no verdict, which is not ok") {
  const auto s = sampled(10, 1, [](double) { return 20.0; }); // 11 samples, 6 in the half
  const auto sut = judge_rss_trend(s);
  CHECK(sut.result == rss_trend::verdict::too_few_samples);
  CHECK_FALSE(sut.ok());
  CHECK_FALSE(judge_rss_trend({}).ok());
}

TEST_CASE("rss_trend: the summary names the figures and the verdict") {
  const auto s = sampled(600, 1, [](double t) { return warm_then_flat(t, 200); });
  const auto line = to_string(judge_rss_trend(s));
  CHECK(line.find("rss 601 samples over 600 s: 14.5 -> 30.0 MiB (max 30.0)") != std::string::npos);
  CHECK(line.find("trend +0.00 MiB/min") != std::string::npos);
  CHECK(line.find(": plateau") != std::string::npos);
}
