#pragma once

// kvlane::actors::slo_targets — the latency objectives per priority class that the
// scheduler serves for ([scheduler.slo], docs/scheduling.md "Goodput").
//
// A request meets its objective when its time to first token is at most `ttft_ms` and its
// mean time per output token after the first is at most `tpot_ms`. The defaults are the
// objectives kvlane's benchmarks count goodput against (docs/benchmarks.md): an interactive
// request answers within 2 s and streams at 5 tokens/s or better, a batch request starts
// within a minute and streams at 1 token/s or better.

#include <cstdint>

namespace kvlane::actors {

enum class priority_class : std::uint8_t; // actors/messages.hpp

struct slo_bound {
  double ttft_ms = 0; ///< time to first token, at most
  double tpot_ms = 0; ///< mean time per output token after the first, at most

  friend bool operator==(const slo_bound&, const slo_bound&) = default;
};

struct slo_targets {
  slo_bound interactive{2000, 200};
  slo_bound batch{60000, 1000};

  const slo_bound& of(priority_class c) const noexcept {
    return static_cast<std::uint8_t>(c) == 1 ? batch : interactive; // 1: priority_class::batch
  }

  friend bool operator==(const slo_targets&, const slo_targets&) = default;
};

} // namespace kvlane::actors
