#include "tools/bench/stats.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace kvlane::tools::bench;

TEST_CASE("bench stats: percentiles interpolate linearly between ranks") {
  const std::vector<double> sut{15, 20, 35, 40, 50};
  CHECK(percentile(sut, 0) == 15);
  CHECK(percentile(sut, 100) == 50);
  CHECK(percentile(sut, 50) == 35);
  CHECK(percentile(sut, 40) == doctest::Approx(29)); // index 1.6: 20 + 0.6 * 15
  CHECK(percentile(sut, 99) == doctest::Approx(49.6));
}

TEST_CASE("bench stats: percentiles do not depend on sample order") {
  const std::vector<double> sut{9, 1, 8, 2, 7, 3, 6, 4, 5, 10};
  CHECK(percentile(sut, 90) == doctest::Approx(9.1));
  CHECK(percentile(sut, 50) == doctest::Approx(5.5));
}

TEST_CASE("bench stats: one sample is every percentile and none is NaN") {
  const std::vector<double> one{42};
  CHECK(percentile(one, 1) == 42);
  CHECK(percentile(one, 99) == 42);
  const std::vector<double> sut;
  CHECK(std::isnan(percentile(sut, 50)));
  CHECK(std::isnan(mean(sut)));
}

TEST_CASE("bench stats: the CDF ends at 1 and is thinned to the asked size") {
  std::vector<double> sut;
  for (int i = 1000; i > 0; --i)
    sut.push_back(i);
  auto c = cdf(sut, 50);
  CHECK(c.size() <= 51);
  CHECK(c.front().first == 1);
  CHECK(c.back().first == 1000);
  CHECK(c.back().second == 1.0);
  for (std::size_t i = 1; i < c.size(); ++i) {
    CHECK(c[i].first >= c[i - 1].first);
    CHECK(c[i].second > c[i - 1].second);
  }
  CHECK(cdf(std::vector<double>{}).empty());
}
