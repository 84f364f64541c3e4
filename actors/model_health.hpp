#pragma once

// kvlane::actors::model_health — whether one model's serving core is alive,
// and its latest figures.
//
// Problem it solves: a model's scheduler (and its lanes, which are linked to
// it) can die — a lane error, any exception. Everything that talks to that
// model must learn it at once and without a round trip to a dead actor:
// submits are refused, status and metrics show the model failed, the daemon
// decides what to do. The engine's monitor actor and the model's sessions
// mark it failed (a session does so before it ends its stream, so an app
// that reads that end and submits again is refused); any thread may read.
//
// Threading: thread-safe. `failed()` is one atomic load (the submit path);
// the rest takes a mutex held only to copy a few fields.

#include "actors/scheduler.hpp"

#include <caf/error.hpp>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

namespace kvlane::actors {

/// Why a model whose scheduler stopped with `reason` failed: the one wording
/// the monitor and the model's sessions record (whichever learns it first).
inline std::string scheduler_stopped(const caf::error& reason) {
  return fmt::format("its scheduler stopped: {}", caf::to_string(reason));
}

class model_health {
public:
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  /// Why the model failed (empty while it serves).
  std::string reason() const {
    std::lock_guard lock{mu_};
    return reason_;
  }

  /// Marks the model failed; the first reason wins. Returns false if it was already.
  bool mark_failed(std::string why) {
    std::lock_guard lock{mu_};
    if (failed_.load(std::memory_order_relaxed))
      return false;
    reason_ = std::move(why);
    failed_.store(true, std::memory_order_release);
    return true;
  }

  /// The figures of the last refresh, if one has completed.
  std::optional<scheduler_stats> last_stats() const {
    std::lock_guard lock{mu_};
    return stats_;
  }

  void set_stats(const scheduler_stats& s) {
    std::lock_guard lock{mu_};
    stats_ = s;
  }

private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::optional<scheduler_stats> stats_;
};

} // namespace kvlane::actors
