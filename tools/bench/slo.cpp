#include "tools/bench/slo.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace kvlane::tools::bench {

bool meets_slo(const request_outcome& o, const slo_set& slo) noexcept {
  if (!o.completed() || !std::isfinite(o.ttft_ms))
    return false;
  const auto& b = slo.of(o.interactive);
  if (o.ttft_ms > b.ttft_ms)
    return false;
  return !std::isfinite(o.tpot_ms) ? o.generated <= 1 : o.tpot_ms <= b.tpot_ms;
}

slo_result evaluate_slo(std::span<const request_outcome> requests, double makespan_s,
                        const slo_set& slo) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  slo_result r;
  for (auto& o : requests) {
    if (!meets_slo(o, slo))
      continue;
    ++r.met;
    ++(o.interactive ? r.met_interactive : r.met_batch);
  }
  r.attainment = requests.empty() ? nan : static_cast<double>(r.met) / requests.size();
  r.goodput_req_s = makespan_s > 0 ? static_cast<double>(r.met) / makespan_s : nan;
  return r;
}

expected<slo_bound, std::string> parse_slo_bound(std::string_view text) {
  auto comma = text.find(',');
  if (comma == std::string_view::npos)
    return unexpected(fmt::format("'{}' is not TTFT_MS,TPOT_MS", text));
  auto number = [](std::string_view s, double& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc{} && p == s.data() + s.size() && std::isfinite(out)
           && out > 0;
  };
  slo_bound b;
  if (!number(text.substr(0, comma), b.ttft_ms) || !number(text.substr(comma + 1), b.tpot_ms))
    return unexpected(
      fmt::format("'{}' is not TTFT_MS,TPOT_MS with two positive numbers", text));
  return b;
}

} // namespace kvlane::tools::bench
