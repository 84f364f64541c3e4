#pragma once

// kvlane::tools::bench — completion_stream: what an OpenAI completion stream reported.
//
// Problem it solves: kvlaned and llama-server both stream /v1/completions as
// SSE `data:` events, but report the figures a race compares in different
// places: generated text in `choices[0].text` (one event per token, or fewer
// when text is held back), token counts in a `usage` object (kvlaned: a final
// event with empty `choices`; llama-server: on its last text event), the
// prompt tokens taken from a prefix cache in
// `usage.prompt_tokens_details.cached_tokens` (both) and llama-server's own
// `timings.prompt_n` / `timings.cache_n` (prompt tokens evaluated / reused),
// failures as a `data: {"error": {...}}` event or, before the stream starts,
// an HTTP error status with a JSON body. completion_stream reads each event's
// data and keeps those figures, whichever server sent them; the driver times
// the events it classifies.
//
// Threading: a value; one thread at a time.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvlane::tools::bench {

/// What one event of a completion stream was.
enum class completion_event : std::uint8_t {
  text,  ///< carried non-empty generated text
  other, ///< anything else readable: an empty text, usage, timings, a role
  done,  ///< the `[DONE]` terminator
  error, ///< an error event, or data that is not JSON
};

/// The figures of one streamed completion.
struct completion_figures {
  std::uint32_t events = 0;      ///< data events, [DONE] excluded
  std::uint32_t text_events = 0; ///< events with non-empty text
  std::uint64_t text_bytes = 0;
  std::optional<std::uint64_t> prompt_tokens;     ///< usage.prompt_tokens
  std::optional<std::uint64_t> completion_tokens; ///< usage.completion_tokens
  std::optional<std::uint64_t> cached_tokens;     ///< usage.prompt_tokens_details.cached_tokens
  std::optional<std::uint64_t> timings_prompt_n;  ///< llama-server: prompt tokens evaluated
  std::optional<std::uint64_t> timings_cache_n;   ///< llama-server: prompt tokens reused
  std::optional<std::uint64_t> timings_predicted_n; ///< llama-server: tokens generated
  std::string finish_reason;     ///< the last non-null finish_reason
  bool done = false;             ///< [DONE] arrived
  std::string error;             ///< an error event's message; empty when none

  /// Tokens generated: usage.completion_tokens, else timings.predicted_n,
  /// else the text events.
  std::uint64_t output_tokens() const noexcept;
  /// Prompt tokens taken from a cache: cached_tokens, else timings.cache_n.
  std::optional<std::uint64_t> reused_tokens() const noexcept;
  /// Prompt tokens evaluated: timings.prompt_n, else prompt_tokens - reused.
  std::optional<std::uint64_t> prefilled_tokens() const noexcept;
};

class completion_stream {
public:
  /// Reads one event's data (the text after `data: `).
  completion_event on_data(std::string_view data);

  const completion_figures& figures() const noexcept { return f_; }

private:
  completion_figures f_;
};

/// The message of an error response body: OpenAI's `error.message` (or a
/// string `error`, or llama-server's top-level `message`) when the body is
/// such JSON, else the body itself; at most `max_bytes`, never cutting a
/// UTF-8 character, control characters shown as spaces.
std::string error_message_of(std::string_view body, std::size_t max_bytes = 200);

} // namespace kvlane::tools::bench
