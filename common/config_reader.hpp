#pragma once

// kvlane::config_reader — typed, validated reads from a TOML table.
//
// Problem it solves: every part that owns a config table (the daemon's
// sections, each backend's [model.<kind>]) must report bad input the same
// precise way: "<source>:<line>: <dotted.key>: <what>", unknown keys with a
// "did you mean" hint, ranges and units named. One reader serves them all.
// toml++ exceptions never cross this interface.

#include "common/expected.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

// Returns the error of a failed status from the enclosing function.
#define KVLANE_CONFIG_TRY(...)                                                                    \
  do {                                                                                            \
    if (auto status_ = (__VA_ARGS__); !status_)                                                   \
      return ::kvlane::unexpected(std::move(status_.error()));                                    \
  } while (false)

namespace kvlane {

struct config_error {
  std::string key;        ///< dotted key, e.g. "model[0].sim.slots"; empty for syntax errors
  std::uint32_t line = 0; ///< 1-based line, 0 when unknown
  std::string message;    ///< full human-readable message, including key and line
};

/// Parses a byte size as written in kvlane.toml: digits, then optionally one
/// space and a unit: B, KiB, MiB, GiB, TiB (powers of 1024) or kB/KB, MB, GB,
/// TB (powers of 1000). "64MiB", "8 GiB", "1GB", "4096". Empty on anything
/// else (signs, fractions, other units, trailing text) and on overflow.
std::optional<std::uint64_t> parse_byte_size(std::string_view text) noexcept;

namespace config_reader {

using status = expected<void, config_error>;

inline constexpr std::uint64_t kib = 1ull << 10;
inline constexpr std::uint64_t mib = 1ull << 20;
inline constexpr std::uint64_t tib = 1ull << 40;

/// One accepted spelling of an enumerated value.
template <class E>
struct choice {
  std::string_view name;
  E value;
};

/// 1-based line of a node.
std::uint32_t line_of(const toml::node& n);
/// "table", "integer", ... for "expected X, got Y" messages.
std::string_view type_name(const toml::node& n);
/// The text in double quotes with escapes, as in error messages.
std::string quoted(std::string_view s);
/// "64MiB" when the value is a whole number of a binary unit, else plain bytes.
std::string format_bytes(std::uint64_t v);
/// Levenshtein distance, for "did you mean" hints.
std::size_t edit_distance(std::string_view a, std::string_view b);

template <class E>
inline std::string list_names(std::span<const choice<E>> choices) {
  std::string out;
  for (const auto& c : choices)
    out += (out.empty() ? "" : ", ") + quoted(c.name);
  return out;
}

/// Builds errors that start with "<source>:<line>: ".
class reporter {
public:
  explicit reporter(std::string_view source) : source_(source) {}

  config_error error(std::string key, std::uint32_t line, std::string_view body) const {
    std::string message = line != 0 ? fmt::format("{}:{}: {}", source_, line, body)
                                    : fmt::format("{}: {}", source_, body);
    return config_error{std::move(key), line, std::move(message)};
  }

  /// "<source>:<line>: <key>: <what>"
  config_error bad_value(std::string key, std::uint32_t line, std::string_view what) const {
    auto body = fmt::format("{}: {}", key, what);
    return error(std::move(key), line, body);
  }

  config_error wrong_type(std::string key, const toml::node& n, std::string_view expected) const {
    return bad_value(std::move(key), line_of(n),
                     fmt::format("expected {}, got {}", expected, type_name(n)));
  }

private:
  std::string_view source_;
};

/// One TOML table and its dotted path in error messages ("model[0].sim").
struct section {
  const toml::table& table;
  std::string path;

  std::string key(std::string_view name) const {
    return path.empty() ? std::string(name) : fmt::format("{}.{}", path, name);
  }
  const toml::node* find(std::string_view name) const { return table.get(name); }
  std::uint32_t line() const { return line_of(table); }
  /// Line of `name` if present, else of the table (for checks on defaulted keys).
  std::uint32_t line(std::string_view name) const {
    const auto* n = find(name);
    return n != nullptr ? line_of(*n) : line();
  }
};

struct real_range {
  double lo;
  bool lo_open;
  double hi; ///< infinity = unbounded (the value must still be finite)
  bool hi_open;

  bool contains(double x) const {
    return std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
  std::string describe() const {
    if (std::isinf(hi))
      return fmt::format("a finite number {} {}", lo_open ? ">" : ">=", lo);
    if (!lo_open && !hi_open)
      return fmt::format("between {} and {}", lo, hi);
    return fmt::format("{} {} and {} {}", lo_open ? ">" : ">=", lo, hi_open ? "<" : "<=", hi);
  }
};

inline constexpr real_range non_negative{0.0, false, std::numeric_limits<double>::infinity(), false};
inline constexpr real_range unit_interval{0.0, false, 1.0, false};

/// Rejects keys of `s` that are not in `known`; reports the first by line.
status check_keys(const reporter& r, const section& s, std::span<const std::string_view> known);
inline status check_keys(const reporter& r, const section& s,
                         std::initializer_list<std::string_view> known) {
  return check_keys(r, s, std::span<const std::string_view>(known.begin(), known.size()));
}

/// The sub-table `name` of `s`, or nullptr when absent.
expected<const toml::table*, config_error> find_table(const reporter& r, const section& s,
                                                      std::string_view name);

/// Reads a float; integers are accepted too (`time_scale = 100`).
status read_real(const reporter& r, const section& s, std::string_view name, double& out,
                 real_range range);

status read_string(const reporter& r, const section& s, std::string_view name, std::string& out);

/// Reads `true` or `false` (TOML booleans only: not 0/1 or "yes").
status read_bool(const reporter& r, const section& s, std::string_view name, bool& out);

/// Reads a byte size: a non-negative integer or a string such as "64MiB".
status read_bytes(const reporter& r, const section& s, std::string_view name, std::uint64_t& out,
                  std::uint64_t lo, std::uint64_t hi);

template <class T>
status read_int(const reporter& r, const section& s, std::string_view name, T& out,
                std::int64_t lo, std::int64_t hi) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  const auto* v = n->as_integer();
  if (v == nullptr)
    return unexpected(r.wrong_type(s.key(name), *n, "integer"));
  const std::int64_t x = v->get();
  if (x < lo || x > hi)
    return unexpected(r.bad_value(s.key(name), line_of(*n),
                                  fmt::format("must be between {} and {} (got {})", lo, hi, x)));
  out = static_cast<T>(x);
  return {};
}

template <class Out, class E>
status read_choice(const reporter& r, const section& s, std::string_view name, Out& out,
                   std::span<const choice<E>> choices) {
  if (s.find(name) == nullptr)
    return {};
  std::string text;
  KVLANE_CONFIG_TRY(read_string(r, s, name, text));
  for (const auto& c : choices) {
    if (c.name == text) {
      out = c.value;
      return {};
    }
  }
  return unexpected(r.bad_value(s.key(name), s.line(name),
                                fmt::format("must be one of {} (got {})", list_names(choices),
                                            quoted(text))));
}

} // namespace config_reader
} // namespace kvlane
