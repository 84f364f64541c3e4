#pragma once

// kvlane::ipcbench::http_load — a minimal HTTP/1.1 SSE client for benchmarks.
//
// Drives a kvlaned's /v1/completions with streaming requests over blocking
// loopback sockets (keep-alive, one connection per stream) and measures the
// time to the first token and the tokens each stream receives. Not a general
// HTTP client: it expects kvlaned's chunked SSE responses.
//
// Threading: each function is self-contained; run_http_streams() starts one
// thread per stream.

#include <cstdint>
#include <string>
#include <vector>

namespace kvlane::ipcbench {

/// One blocking connection to 127.0.0.1:port; -1 on failure.
int http_connect(std::uint16_t port);

struct sse_request_result {
  bool ok = false;
  std::uint32_t text_events = 0; ///< SSE events carrying text (one per token)
  double ttft_us = 0;            ///< request sent to the first text event
};

/// Sends one streaming completion on `fd` (keep-alive) and reads it to [DONE].
sse_request_result sse_completion(int fd, const std::string& model, const std::string& prompt,
                                  std::uint32_t max_tokens);

struct http_streams_result {
  std::uint64_t tokens = 0;
  double seconds = 0;
  std::uint64_t requests = 0;
  std::uint64_t short_requests = 0; ///< requests that got fewer text events than max_tokens
  std::uint64_t failed = 0;
};

/// `streams` connections each run completions of `max_tokens` back to back for `seconds`.
http_streams_result run_http_streams(std::uint16_t port, const std::string& model,
                                     std::uint32_t streams, std::uint32_t max_tokens,
                                     double seconds);

} // namespace kvlane::ipcbench
