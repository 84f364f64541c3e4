#include "actors/keep_alive.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace kvlane::actors {

namespace {

// The longest idle time accepted (longer ones are surely mistakes; pin instead).
constexpr double max_ms = 3.2e12; // ~101 years: now + it stays within a steady_clock time point

struct unit {
  std::string_view name;
  double ms;
};
// Longest names first where one is a prefix of another ("ms" before "m").
constexpr unit units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"\xC2\xB5s", 1e-3}, {"\xCE\xBCs", 1e-3},
                          {"ms", 1.0},  {"s", 1e3},   {"m", 60e3},         {"h", 3600e3}};

expected<keep_alive, std::string> from_ms(double ms, std::string_view text) {
  if (ms < 0)
    return keep_alive::pinned();
  if (ms > max_ms)
    return unexpected(fmt::format("keep_alive '{}' is too long (at most 100 years)", text));
  if (ms == 0)
    return keep_alive::after(keep_alive::duration{0});
  return keep_alive::after(keep_alive::duration{std::max<std::int64_t>(1, std::llround(std::ceil(ms)))});
}

} // namespace

expected<keep_alive, std::string> parse_keep_alive(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return unexpected(fmt::format("keep_alive '{}' is not a duration: {} (write e.g. \"5m\", "
                                  "\"1h30m\", \"30s\", \"0\" to unload after the request, or "
                                  "\"-1\"/\"pinned\" to keep the model loaded)",
                                  text, why));
  };
  if (text == "pinned")
    return keep_alive::pinned();
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s == "0")
    return keep_alive::after(keep_alive::duration{0});
  if (s.empty())
    return bad("it is empty");
  // Ollama's clients write "-1" for "keep loaded"; Go's parser would want a
  // unit, but a negative value pins whatever its size.
  if (negative && s.find_first_not_of("0123456789.") == std::string_view::npos)
    return keep_alive::pinned();
  double total = 0;
  while (!s.empty()) {
    std::size_t digits = 0;
    bool dot = false, any = false;
    while (digits < s.size() && (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) {
      if (s[digits] == '.') {
        if (dot)
          return bad("a number has two decimal points");
        dot = true;
      } else {
        any = true;
      }
      ++digits;
    }
    if (!any)
      return bad(fmt::format("expected a number at '{}'", s));
    const double value = std::strtod(std::string{s.substr(0, digits)}.c_str(), nullptr);
    s.remove_prefix(digits);
    const unit* found = nullptr;
    for (const auto& u : units)
      if (s.starts_with(u.name) && (found == nullptr || u.name.size() > found->name.size()))
        found = &u;
    if (found == nullptr)
      return bad(s.empty() ? std::string{"a number without a unit (ns, us, ms, s, m, h)"}
                           : fmt::format("unknown unit at '{}' (ns, us, ms, s, m, h)", s));
    s.remove_prefix(found->name.size());
    total += value * found->ms;
    if (!std::isfinite(total) || total > max_ms)
      return unexpected(fmt::format("keep_alive '{}' is too long (at most 100 years)", text));
  }
  return from_ms(negative ? -total : total, text);
}

expected<keep_alive, std::string> keep_alive_seconds(double seconds) {
  if (!std::isfinite(seconds))
    return unexpected(std::string{"keep_alive must be a finite number of seconds"});
  return from_ms(seconds * 1e3, fmt::format("{}", seconds));
}

std::string to_string(const keep_alive& k) {
  if (k.is_pinned())
    return "pinned";
  auto ms = k.idle().count();
  if (ms == 0)
    return "0s";
  std::string out;
  if (ms >= 3'600'000) {
    out += fmt::format("{}h", ms / 3'600'000);
    ms %= 3'600'000;
  }
  if (ms >= 60'000) {
    out += fmt::format("{}m", ms / 60'000);
    ms %= 60'000;
  }
  if (ms >= 1000 && ms % 1000 == 0)
    out += fmt::format("{}s", ms / 1000);
  else if (ms > 0)
    out += ms >= 1000 ? fmt::format("{}.{:03}s", ms / 1000, ms % 1000) : fmt::format("{}ms", ms);
  return out;
}

} // namespace kvlane::actors
