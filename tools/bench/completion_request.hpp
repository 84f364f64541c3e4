#pragma once

// kvlane::tools::bench — completion_request: the /v1/completions request a race sends.
//
// Problem it solves: the two servers raced must be asked for the same work in
// each one's own dialect. Both get a streamed completion of a text prompt,
// greedy, with `max_tokens` = the request's output length and the usage
// figures at the end (`stream_options.include_usage`). llama-server also gets
// `ignore_eos: true`, so every request generates exactly its recorded length;
// kvlaned refuses fields it does not implement (docs/http.md) and has no
// equivalent, so it gets only its `priority` class (`interactive` or
// `batch`), which llama-server has no use for.
//
// The prompt's text comes from the workload's tokens (trace_request::prompt,
// or synthetic_prompt): letters and spaces, one per token. Sent as such, a
// BPE vocabulary would merge them into about a third as many tokens and every
// prompt length of the trace would shrink. prompt_text writes each token as
// one common English word instead (" the", " of", ...: 27 words, each a
// single token of the Llama 3 BPE vocabulary with its leading space), so a
// prompt of N workload tokens is N model tokens (plus BOS) on a BPE model,
// and two prompts that share N tokens share N words of text — the prefix a
// server's cache can reuse.
//
// Threading: plain functions over values.

#include "backends/backend.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvlane::tools::bench {

/// Which OpenAI-compatible server is driven.
enum class server_kind : std::uint8_t { kvlane, llama_server };
std::string_view to_string(server_kind k) noexcept;
std::optional<server_kind> parse_server_kind(std::string_view s) noexcept;

/// The text of a prompt: one word per token (see above). Tokens outside
/// 'a'..'z' and ' ' map to a word as well (by their value modulo 27).
std::string prompt_text(std::span<const backends::token_id> tokens);

/// The word a token becomes, with its leading space.
std::string_view prompt_word(backends::token_id token) noexcept;

struct completion_request {
  std::string model;
  std::string prompt;
  std::uint32_t max_tokens = 16;
  bool interactive = true;
};

/// The JSON body of a streamed /v1/completions request for `kind`.
std::string completion_body(server_kind kind, const completion_request& r);

} // namespace kvlane::tools::bench
