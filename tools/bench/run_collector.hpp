#pragma once

// kvlane::tools::bench::run_collector — what one run's requests did, as the
// driver sends them and their streams end.
//
// Problem it solves: both drivers (the in-process engine and a kvlaned child)
// record the same things at the same moments — a request sent or refused, a
// stream's end — under one lock, wake the driver waiting for the ends, and
// tell the turn gate so a held turn can go. One place does it for both.
//
// Threading: sent() on the driver thread; ended() from any thread (sinks,
// client reader threads). Every field is guarded by `mutex`.

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/turn_gate.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

struct run_collector {
  using clock = std::chrono::steady_clock;

  std::mutex mutex;
  std::condition_variable cv;               ///< notified at every end
  std::vector<request_outcome>* outcomes = nullptr; ///< null once the run has given up
  std::size_t ended = 0;
  clock::time_point start;
  clock::time_point last_end;
  double time_scale = 1;
  std::shared_ptr<turn_gate> gate;          ///< told of every end (outside the lock)

  /// The driver sent request `index` (`r`, released as `rel`): records its
  /// hold and whether it was accepted (`refusal` empty) or refused. A refused
  /// turn releases the next turn of its conversation. Returns whether accepted.
  bool sent(std::size_t index, const trace_request& r, const turn_gate::release& rel,
            std::string refusal);

  /// Request `index` ended at `now`: `fill(outcome, time_scale)` writes what
  /// the stream reported; then the end is counted, the driver woken and the
  /// gate told. Nothing happens once the run has given up on its requests.
  template <class Fill>
  void end(std::size_t index, clock::time_point now, Fill&& fill) {
    {
      std::lock_guard lock{mutex};
      if (!outcomes)
        return;
      auto& o = (*outcomes)[index];
      o.ended = true;
      fill(o, time_scale);
      o.end_s = std::chrono::duration<double>(now - start).count() * time_scale;
      last_end = std::max(last_end, now);
      ++ended;
    }
    cv.notify_all();
    if (gate)
      gate->ended(index);
  }
};

} // namespace kvlane::tools::bench
