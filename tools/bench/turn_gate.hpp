#pragma once

// kvlane::tools::bench::turn_gate — when each request of a run may be sent.
//
// Problem it solves: a conversation trace replayed open-loop at its own
// timestamps sends turn k+1 at its recorded time even when turn k, on a box
// slower than the service the trace was recorded on, has not ended: a prompt
// that quotes an answer which does not exist yet. No user can do that, and no
// cache can reuse KV that is still being generated, so such a replay makes
// reuse look worse than it is (and queues look longer). With causal turns a
// request that names a previous turn (trace_request::previous_turn) is sent
// at its trace time or, if later, the moment its previous turn ended.
//
// The driver asks next() for the next request to send, in arrival order
// except for held turns, which go as soon as they are released; the run's
// sinks report ended(). Requests without a previous turn go exactly at their
// trace times, as before.
//
// Threading: next() on the driver thread; ended() from any thread.

#include "tools/bench/trace.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvlane::tools::bench {

class turn_gate {
public:
  using clock = std::chrono::steady_clock;

  /// `requests` in arrival order; arrivals are simulated seconds, sent at
  /// `start` + arrival / `time_scale` of wall time.
  turn_gate(std::span<const trace_request> requests, clock::time_point start, double time_scale);

  struct release {
    std::size_t index = 0;
    /// The earliest it could go: its trace time, or its previous turn's end
    /// if later (the driver's lag is measured from here).
    clock::time_point due;
    bool held = false; ///< its previous turn ended after its trace time
  };

  /// Waits until the next request may be sent and returns it; nullopt when
  /// every request has been released, or at `deadline` (the held turns whose
  /// previous turn never ended are then never sent).
  std::optional<release> next(clock::time_point deadline);

  /// Request `index` ended, or was refused at submit: its next turn may go.
  void ended(std::size_t index);

private:
  std::vector<clock::time_point> due_;
  std::vector<std::ptrdiff_t> previous_;
  std::size_t cursor_ = 0; ///< the next request in arrival order not yet looked at

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::optional<clock::time_point>> ended_at_;
  std::unordered_map<std::size_t, std::size_t> held_; ///< previous turn -> the turn waiting for it
  std::deque<release> released_;                      ///< held turns whose previous turn ended
};

} // namespace kvlane::tools::bench
