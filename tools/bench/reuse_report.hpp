#pragma once

// kvlane::tools::bench — reuse_report: the figures of one reuse policy's run.
//
// Problem it solves: comparing conversation reuse policies (--reuse) needs
// each run read the same way: how many prompt tokens were reused against what
// an unlimited cache could have reused (trace_request::seen_prefix_tokens),
// what was prefilled, what the store moved and evicted, and the first-token
// latency of the requests that had a reusable prefix, where reuse shows. The
// JSON field names are part of the interface (docs/benchmarks.md).
//
// Threading: plain functions over values.

#include "tools/bench/bench_runner.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

/// One policy's figures. Times are simulated ms, rates per simulated second.
struct reuse_summary {
  std::string policy;
  double throughput_tok_s = 0;   ///< output tokens over the run
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  /// Over the completed requests whose prompt had a prefix seen before.
  double ttft_p50_reusable_ms = 0, ttft_p99_reusable_ms = 0;
  std::uint64_t prompt_tokens = 0;            ///< sent
  std::uint64_t reused_tokens = 0;            ///< not prefilled: taken from retained KV
  std::uint64_t achievable_reused_tokens = 0; ///< an unlimited cache, same order
  std::uint64_t prefill_tokens = 0;           ///< prefilled (recomputes included)
  std::uint64_t loads = 0, dumps = 0;         ///< all transfers (preemption and reuse)
  std::uint64_t peak_store_bytes = 0;
  std::uint64_t retained_evictions = 0;       ///< retained snapshots the store evicted
  std::size_t completed = 0, failed = 0;      ///< failed: did not end normally
  std::size_t reusable_requests = 0;          ///< requests with a prefix seen before
  std::uint64_t reuse_hits = 0, reuse_warm_hits = 0; ///< requests served from retained KV
  /// Causal turns: sent after their trace time, waiting for the previous
  /// turn's end, and their mean wait (simulated ms).
  std::size_t held_turns = 0;
  double held_ms_mean = 0;
  bool timed_out = false;
};

/// Reads `r` (the run of `requests`, same order) as policy `policy`.
reuse_summary summarize_reuse(std::string policy, const run_result& r,
                              std::span<const trace_request> requests);

/// The table: one column per policy, then reused / achievable per policy.
std::string format_reuse(const std::vector<reuse_summary>& runs);

} // namespace kvlane::tools::bench
