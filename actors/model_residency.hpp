#pragma once

// kvlane::actors::model_residency — which configured models are loaded, and
// which one goes when another needs room or its keep_alive has run out.
//
// Problem it solves: the decisions of the model lifecycle (docs/architecture.md,
// "Model lifecycle") must be exact and testable without a clock or a device:
// a model whose keep_alive ran out while idle unloads; a load past
// [models] max_loaded first unloads the least recently used idle model; a
// model with running requests is never chosen, and the load waits instead.
// The registry (actors/model_registry) applies what these functions decide.
//
// Threading: pure functions over a view the caller builds under its lock.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvlane::actors {

enum class residency : std::uint8_t {
  unloaded,  ///< configured, not on the device
  loading,   ///< its backend and scheduler are being created
  loaded,    ///< serving
  unloading, ///< its warm KV goes to the store, then its backend is released
};
std::string_view to_string(residency r) noexcept;

struct resident_view {
  using time_point = std::chrono::steady_clock::time_point;
  residency state = residency::unloaded;
  std::uint32_t users = 0;  ///< running requests and callers holding it
  time_point last_used{};   ///< when its last user let go (or it loaded)
  /// Loaded and idle: when its keep_alive runs out (none: pinned or in use).
  std::optional<time_point> expires_at;
  bool pinned = false; ///< its keep_alive is a pin
};

/// Loaded, idle models whose keep_alive has run out at `now`, by index.
std::vector<std::size_t> expired_models(std::span<const resident_view> models,
                                        resident_view::time_point now);

/// The earliest expiry still to come after `now` among loaded idle models.
std::optional<resident_view::time_point> next_expiry(std::span<const resident_view> models,
                                                     resident_view::time_point now);

struct room_decision {
  enum class verdict : std::uint8_t {
    fits,   ///< load `wanted` now
    unload, ///< unload `victim` first, then decide again
    wait,   ///< every resident model is in use (or changing): wait for one to end
  };
  verdict what = verdict::fits;
  std::size_t victim = 0; ///< verdict unload
};

/// Whether `wanted` (unloaded) may load under `max_loaded` (0: no bound):
/// models loading, loaded or unloading count as resident. The victim is the
/// least recently used loaded model without users; a pinned model is a
/// victim too (pinned means "not for being idle"), after every unpinned one.
room_decision make_room(std::span<const resident_view> models, std::size_t wanted,
                        std::uint32_t max_loaded);

} // namespace kvlane::actors
