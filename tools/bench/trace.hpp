#pragma once

// kvlane::tools::bench — trace: the requests a benchmark replays.
//
// Problem it solves: a request trace (the Azure LLM inference trace format:
// CSV with TIMESTAMP,ContextTokens,GeneratedTokens) has to become a list of
// requests with arrival times, prompt and output lengths, parsed strictly so a
// bad row is reported with its line instead of silently skewing a benchmark.
// Prompts that do not fit the model's context are clamped, and counted.
//
// Threading: plain functions over values.

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// One request of a workload. Times are in simulated (device) seconds.
struct trace_request {
  double arrival_s = 0;            ///< since the workload's first request
  std::uint32_t prompt_tokens = 1; ///< >= 1
  std::uint32_t output_tokens = 1; ///< forced output length, >= 1
  bool interactive = false;
  bool clamped = false;            ///< shortened to fit the model's context
  /// Who sends it: the scope of conversation reuse (0 for every request of a
  /// trace without conversations).
  std::uint64_t owner = 0;
  /// Its tokens (the first prompt_tokens are sent); null: synthetic_prompt.
  std::shared_ptr<const std::vector<backends::token_id>> prompt = nullptr;
  /// Prompt tokens an earlier request of the same owner sent as a prefix
  /// (what an unlimited cache could reuse; achievable_reuse).
  std::uint32_t seen_prefix_tokens = 0;
  /// Its conversation in a conversation trace (0.. in order of first
  /// appearance); 0 for every request of a trace without conversations.
  std::uint32_t conversation = 0;
  /// Which of the run's models serves it (an index into
  /// run_options::models; 0 = the one model of a single-model run).
  std::uint32_t model = 0;
  /// The previous turn of its conversation (an index into the same request
  /// list, always earlier), or -1: with causal turns it is not sent before
  /// that one has ended (turn_gate).
  std::int32_t previous_turn = -1;
};

struct trace_error {
  std::uint32_t line = 0; ///< 1-based; 0 when the error is not about one line
  std::string message;    ///< "<source>:<line>: <what>"
};

/// The header every trace starts with.
inline constexpr std::string_view trace_header = "TIMESTAMP,ContextTokens,GeneratedTokens";

/// Parses a trace: the header line, then one row per request. TIMESTAMP is
/// either `YYYY-MM-DD HH:MM:SS[.fraction]` (UTC) or plain seconds (digits with
/// an optional fraction); rows must not go back in time. ContextTokens and
/// GeneratedTokens are whole numbers >= 1. Only the first `max_rows` rows are
/// read (0 = all). Arrival times are relative to the first row. Lines may end
/// in CRLF; only a final line break may leave an empty line.
expected<std::vector<trace_request>, trace_error> parse_trace(std::string_view csv,
                                                              std::size_t max_rows = 0,
                                                              std::string_view source = "<trace>");

/// The whole file at `path`, or an error (line 0) that names it. Shared by the
/// trace readers (CSV here, Mooncake JSON lines in mooncake_trace).
expected<std::string, trace_error> read_trace_file(const std::string& path);

/// Reads `path` and delegates to parse_trace.
expected<std::vector<trace_request>, trace_error> load_trace(const std::string& path,
                                                             std::size_t max_rows = 0);

/// Parses a trace TIMESTAMP into nanoseconds (since 1970 for dates, since 0
/// for plain seconds). False on anything else.
bool parse_timestamp(std::string_view text, std::int64_t& out_ns) noexcept;

/// Makes every request fit `max_context` (prompt + output <= max_context):
/// the output is kept (shortened only if it alone leaves no room for a
/// one-token prompt) and the prompt is cut. Marks and counts the clamped ones.
std::size_t clamp_to_context(std::vector<trace_request>& requests, std::uint32_t max_context);

} // namespace kvlane::tools::bench
