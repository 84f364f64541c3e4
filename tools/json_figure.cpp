#include "tools/json_figure.hpp"

#include <cmath>

namespace kvlane::tools {

nlohmann::ordered_json json_figure(double x) {
  if (!std::isfinite(x))
    return nullptr;
  if (x == 0)
    return 0.0;
  const double magnitude = std::fabs(x);
  if (magnitude < 1e-4 || magnitude >= 1e15) {
    // 6 significant digits. Scaling by an exact power of ten (10^k, k <= 22)
    // leaves the double nearest the rounded decimal, which prints as that decimal.
    const int k = 5 - static_cast<int>(std::floor(std::log10(magnitude)));
    if (k > 22)
      return x;
    if (k > 0) {
      const double scale = std::pow(10.0, k);
      return std::round(x * scale) / scale;
    }
    const double unit = std::pow(10.0, -k);
    return std::round(x / unit) * unit;
  }
  const double rounded = std::round(x * 1e4) / 1e4;
  return rounded == 0 ? 0.0 : rounded; // no "-0"
}

} // namespace kvlane::tools
