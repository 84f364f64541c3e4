#pragma once

// kvlane::tools::schemabench — schema_decode: one stream's decode speed with and without a
// JSON Schema, measured through a server's OpenAI chat API.
//
// Problem it solves: structured output must not slow generation down. kvlaned computes a
// sequence's token mask on the host while the device runs the step (docs/architecture.md,
// "Grammar engine"), so a constrained stream should decode as fast as a free one; a grammar
// sampler that runs after the logits (llama-server's) adds its cost to every token. The
// figure is the decode rate of one streamed chat completion, greedy: tokens after the first
// over the time from the first content event to the last. A request with the schema and one
// without are sent in turn (round robin), so drift of a noisy machine falls on both alike,
// and each side's median is compared.
//
// Threading: plain functions; each call blocks on its request.

#include "tools/bench/http_client.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::schemabench {

/// The schema the bench constrains to: an incident report of 20 fields (uuid, date-times,
/// enums, bounded and free strings, two patterns, integer and number ranges, a nested object,
/// an array of objects, anyOf), the shape of a realistic extraction request.
std::string_view incident_schema() noexcept;

struct decode_request {
  std::string model;
  std::string prompt;
  std::uint32_t max_tokens = 200;
  bool with_schema = false;
};

/// The JSON body of a streamed, greedy /v1/chat/completions request: `response_format`
/// json_schema (strict) with incident_schema() when with_schema, usage in the last event.
std::string decode_body(const decode_request& r);

struct decode_sample {
  std::uint64_t tokens = 0;     ///< usage.completion_tokens (else content events)
  std::uint32_t content_events = 0;
  double first_s = 0;           ///< first content event, since the request was sent
  double last_s = 0;            ///< last content event
  std::string text;             ///< the content, concatenated
  std::string finish_reason;
  /// Tokens after the first per second of decoding; 0 when fewer than 2 events.
  double decode_tok_s() const noexcept;
};

/// Sends `r` to `client` and reads its stream by `deadline`. Error: the transport's, an HTTP
/// status other than 200 (with the body's message), an error event, or a stream without
/// content.
expected<decode_sample, std::string> run_decode(bench::http_client& client, const decode_request& r,
                                                bench::http_client::clock::time_point deadline);

/// The median of `v` (0 for none).
double median(std::vector<double> v);

} // namespace kvlane::tools::schemabench
