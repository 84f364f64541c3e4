#pragma once

// kvlane::actors::keep_alive — how long a model stays loaded once its last
// request has ended, in Ollama's terms.
//
// Problem it solves: Ollama clients say it per request (`keep_alive`: a Go
// duration string such as "5m" or "1h30m", or a number of seconds; 0 unloads
// the model as soon as the request ends; a negative value keeps it loaded) and
// the config says it per model ([[model]] keep_alive). One parser serves both,
// so "5m" means the same in a request and in kvlane.toml, and a bad value gets
// one precise message.
//
// Threading: plain values and pure functions.

#include "common/expected.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kvlane::actors {

class keep_alive {
public:
  using duration = std::chrono::milliseconds;

  /// Unloaded `d` after the last request ends (0: at once).
  static keep_alive after(duration d) noexcept { return keep_alive{d}; }
  /// Never unloaded for being idle (only by `kvlane unload`, a swap never takes it).
  static keep_alive pinned() noexcept { return keep_alive{}; }

  bool is_pinned() const noexcept { return !after_.has_value(); }
  /// The idle time before unloading; meaningless when pinned.
  duration idle() const noexcept { return after_.value_or(duration::max()); }

  friend bool operator==(const keep_alive&, const keep_alive&) = default;

private:
  keep_alive() = default;
  explicit keep_alive(duration d) : after_(d) {}
  std::optional<duration> after_;
};

/// Parses a Go duration string as Ollama does ("5m", "1h30m", "2.5s", "300ms",
/// "0", "-1m"): a sign, then one or more number+unit pairs with units ns, us
/// (or µs), ms, s, m, h; a lone "0" needs no unit. A negative duration pins.
/// Also accepts "pinned" (the config's spelling of a pin). Sub-millisecond
/// durations round up to 1 ms, so only 0 means "at once".
expected<keep_alive, std::string> parse_keep_alive(std::string_view text);

/// A number of seconds (a JSON number in a request, an integer in the config):
/// negative pins, 0 unloads at once. Fails on a value that is not finite or is
/// beyond what a duration holds.
expected<keep_alive, std::string> keep_alive_seconds(double seconds);

/// "pinned", or the idle time in Go's notation ("5m0s" is written "5m").
std::string to_string(const keep_alive& k);

} // namespace kvlane::actors
