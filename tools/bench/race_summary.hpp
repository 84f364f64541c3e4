#pragma once

// kvlane::tools::bench — race_summary: one server's figures on one workload, and the race's targets.
//
// Problem it solves: a race of kvlaned against llama-server is read side by
// side, so both sides' runs must be reduced the same way: which requests
// count (completed ones for latencies and throughput; a failed one is counted
// and its message kept, grouped), which requests form the "reusable prefix"
// and "interactive" groups, where prompt tokens prefilled and reused come
// from (each server's own report in its stream), and how the targets are
// computed (kvlane / llama-server ratios against fixed bounds). The targets
// are figures to print, never assertions.
//
// All times are wall milliseconds; rates are per wall second.
//
// Threading: plain functions over values.

#include "tools/bench/http_driver.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

/// Failed requests with the same status and message.
struct failure_group {
  int status = 0; ///< HTTP status; 0 = none (a connection error or a request never sent)
  std::string message;
  std::size_t count = 0;
};

/// One server's figures on one workload.
struct side_summary {
  std::size_t requests = 0, completed = 0, failed = 0;
  std::size_t interactive = 0, reusable = 0; ///< requests of each group (sent or not)
  std::size_t stopped_early = 0;   ///< completed with finish_reason "stop" (an end-of-text token)
  std::uint64_t output_tokens = 0; ///< of completed requests
  double wall_s = 0;               ///< the first arrival to the last end
  double output_tok_s = 0;         ///< output_tokens / wall_s
  double ttft_p50_ms = 0, ttft_p99_ms = 0;          ///< completed requests
  double ttft_p50_reusable_ms = 0;                  ///< completed later turns of a conversation
  double ttft_p99_interactive_ms = 0;               ///< completed interactive requests
  /// Median over completed requests of one stream's decode rate:
  /// (tokens - 1) / (end - first token). The median, so that one request
  /// slowed by something else on the machine does not move it.
  double decode_tok_s = 0;
  /// Median over completed requests of prompt tokens prefilled / seconds to
  /// the end (the prefill speed of max_tokens = 1 requests).
  double prefill_tok_s = 0;
  /// The most requests sent and not yet ended at once.
  std::size_t peak_in_flight = 0;
  /// The most conversations live at once: from their first request's send
  /// to their last request's end (requests of a conversation trace only; 0
  /// for other workloads).
  std::size_t peak_live_conversations = 0;
  std::uint64_t prefill_tokens = 0, reused_tokens = 0; ///< as the server reported them
  std::size_t prompt_reports = 0;  ///< completed requests that reported prefilled tokens
  std::vector<failure_group> failures; ///< most frequent first
};

/// Reduces one run.
side_summary summarize_side(const http_run_result& run);

/// Groups the failed requests' messages (most frequent first, then by status
/// and message).
std::vector<failure_group> group_failures(const http_run_result& run);

/// Which figure of a side a target compares.
enum class race_metric : std::uint8_t {
  decode_tok_s,
  prefill_tok_s,
  output_tok_s,
  ttft_p50_reusable_ms,
  ttft_p99_interactive_ms,
};
std::string_view to_string(race_metric m) noexcept;
double metric_of(const side_summary& s, race_metric m) noexcept;

/// A target: kvlane's figure over llama-server's on one workload, against a bound.
struct race_target {
  std::string workload;
  race_metric metric = race_metric::output_tok_s;
  std::string label;       ///< what is printed, e.g. "decode tok/s >= 0.95x"
  bool at_least = true;    ///< ratio >= bound (rates) or <= bound (latencies)
  double bound = 1.0;
  double kvlane = 0, llama = 0;
  double ratio = 0;        ///< kvlane / llama; NaN when either side has no figure
  bool met = false;        ///< false when the ratio is NaN
};

/// The race's targets that apply to the workloads raced (by name: decode,
/// prefill, azure, mooncake), each computed from the two sides.
struct race_sides {
  std::string workload;
  std::optional<side_summary> kvlane, llama;
};
std::vector<race_target> race_targets(const std::vector<race_sides>& workloads);

} // namespace kvlane::tools::bench
