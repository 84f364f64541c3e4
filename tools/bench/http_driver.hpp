#pragma once

// kvlane::tools::bench — http_driver: replays a workload against an OpenAI-compatible server.
//
// Problem it solves: to race kvlaned against another server (llama-server)
// both must be driven the same way from outside, through the API every app
// uses: the same requests, at the same wall-clock times, each a streamed
// /v1/completions over a real loopback socket, timed in this process as its
// events arrive. run_http sends every request at its arrival time (arrivals
// are wall seconds here: time_scale 1), a conversation's turn not before its
// previous turn ended (turn_gate, run_collector, as the other drivers do),
// each from a thread of its own — one thread per request in flight — on a
// pool of keep-alive connections (http_client). Per request it keeps what the
// stream said (completion_stream): the first-token time (first event with
// non-empty text), the tokens generated, the prompt tokens prefilled and
// reused, and why it failed: the HTTP status and error message, a stream error
// event, or a connection error.
//
// Threading: run_http blocks the calling thread for the run; request threads
// record only through the run_collector (under its lock) and are all joined
// before it returns.

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/completion_request.hpp"
#include "tools/bench/http_client.hpp"
#include "tools/bench/trace.hpp"

#include "common/expected.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// What one request's HTTP exchange reported, beside its request_outcome.
struct http_figures {
  bool reusable = false;       ///< a later turn of a conversation (see later_turns)
  /// Its conversation (trace_request::conversation) when the request has a
  /// prompt of its own (a conversation trace), else nullopt.
  std::optional<std::uint32_t> conversation;
  int status = 0;              ///< HTTP status; 0 when none arrived
  std::string error;           ///< empty when it completed
  std::uint64_t output_tokens = 0; ///< usage.completion_tokens, else text events
  std::uint32_t text_events = 0;
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> prefilled_tokens;
  std::optional<std::uint64_t> reused_tokens;
  std::string finish_reason;
};

struct http_run_options {
  http_endpoint endpoint;
  server_kind kind = server_kind::kvlane;
  std::string model;
  /// Wall bound on the run (sending and every stream); 0 = 120 s + 4x the arrival span.
  std::chrono::milliseconds timeout{0};
  std::function<void(std::string_view)> progress; ///< optional, one line at a time
  std::string label;                               ///< names the run in progress lines
};

struct http_run_result {
  std::vector<request_outcome> requests; ///< times in wall ms (time_scale 1)
  std::vector<http_figures> http;        ///< same order
  double wall_s = 0;                     ///< the first arrival to the last end
  double max_submit_lag_ms = 0;
  bool timed_out = false;
};

/// For each request: whether it is a later turn of a conversation — it has a
/// prompt of its own (a conversation trace) and an earlier request of the
/// list belongs to the same conversation, so a prefix cache could serve part
/// of its prompt.
std::vector<bool> later_turns(std::span<const trace_request> requests);

/// The prompt text request `index` sends (prompt_of, written by prompt_text).
std::string request_prompt(const trace_request& r, std::uint32_t index);

/// Appends `part` to `into` as if it ran right after it: its times are
/// shifted by `into`'s wall time, the walls add up (a workload sent in rounds,
/// one server start per round).
void append_run(http_run_result& into, http_run_result part);

/// Replays `requests` (in arrival order) against the server. Fails only when
/// it cannot start; request failures are outcomes.
expected<http_run_result, std::string> run_http(const http_run_options& opts,
                                                std::span<const trace_request> requests);

} // namespace kvlane::tools::bench
