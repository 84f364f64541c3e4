#include "tools/json_figure.hpp"

#include <doctest/doctest.h>

#include <limits>

using kvlane::tools::json_figure;

TEST_CASE("json_figure: rounds to 4 decimals or 6 significant digits and writes non-finite as null") {
  CHECK(json_figure(0.1).dump() == "0.1");
  CHECK(json_figure(123456.78901).dump() == "123456.789");
  CHECK(json_figure(2.0).get<double>() == 2.0);
  CHECK(json_figure(-0.00001234567).dump() == "-1.23457e-05");
  CHECK(json_figure(1234567890123456789.0).dump() == "1.23457e+18");
  CHECK(json_figure(-0.00001).dump() == "-1e-05");
  CHECK(json_figure(-0.00000001).dump() == "-1e-08");
  CHECK(json_figure(-0.00004).dump() == "-4e-05");
  CHECK(json_figure(std::numeric_limits<double>::quiet_NaN()).is_null());
  CHECK(json_figure(std::numeric_limits<double>::infinity()).is_null());
}
