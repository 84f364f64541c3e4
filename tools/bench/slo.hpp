#pragma once

// kvlane::tools::bench — slo: per-class latency objectives, and which
// requests of a run met them.
//
// Problem it solves: throughput on open-loop arrivals below saturation is the
// arrival rate whatever the scheduler does; what tells modes apart is how
// many requests were served well. A request meets its class's SLO when it
// completed, its TTFT is within the class's TTFT bound and its TPOT (mean
// time per output token after the first) within the TPOT bound. A failed,
// cancelled or never-ended request meets none. Goodput is the requests per
// simulated second that met their SLO; attainment is their share of all
// requests.
//
// Default bounds (docs/benchmarks.md): interactive TTFT <= 2 s and TPOT <=
// 200 ms, MLPerf Inference's server-scenario bounds for Llama-2-70B (a chat
// reply starts within 2 s and streams at >= 5 tokens/s, about reading speed);
// batch TTFT <= 60 s and TPOT <= 1 s (a queued job whose output a program
// reads: it must start within a minute and keep moving).
//
// Pure: values in, values out. Times are simulated milliseconds.

#include "actors/slo.hpp"
#include "tools/bench/bench_runner.hpp"

#include <span>
#include <string>

namespace kvlane::tools::bench {

/// One class's bounds: the engine's own ([scheduler.slo]), in simulated ms here.
using slo_bound = actors::slo_bound;

struct slo_set {
  slo_bound interactive{2000, 200};
  slo_bound batch{60000, 1000};

  const slo_bound& of(bool is_interactive) const noexcept {
    return is_interactive ? interactive : batch;
  }
  friend bool operator==(const slo_set&, const slo_set&) = default;
};

/// Whether `o` completed within its class's bounds. A request with a single
/// output token has no TPOT and is held to its TTFT bound only.
bool meets_slo(const request_outcome& o, const slo_set& slo) noexcept;

struct slo_result {
  std::size_t met = 0, met_interactive = 0, met_batch = 0;
  double attainment = 0; ///< met / all requests (NaN without requests)
  double goodput_req_s = 0; ///< met / makespan_s (NaN without a makespan)
};

slo_result evaluate_slo(std::span<const request_outcome> requests, double makespan_s,
                        const slo_set& slo);

/// Parses "TTFT_MS,TPOT_MS" (positive numbers) into a bound; an error names
/// what is wrong.
expected<slo_bound, std::string> parse_slo_bound(std::string_view text);

} // namespace kvlane::tools::bench
