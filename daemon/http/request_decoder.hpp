#pragma once

// kvlane::daemon::http::request_decoder — JSON request bodies to validated requests.
//
// Problem it solves: every body a client sends is untrusted. These functions
// are the only place that reads it: they parse the JSON (nesting bounded), check
// every field's type and range, reject fields kvlane does not implement with a
// 400 naming the field (never a silent ignore), and produce a plain request
// value. They know nothing about models or the engine (the caller checks the
// model and the context), so they are pure and fuzzable.

#include "actors/keep_alive.hpp"
#include "actors/messages.hpp"
#include "backends/chat_format.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"
#include "daemon/http/structured_output.hpp"
#include "daemon/http/tool_calls.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon::http {

inline constexpr std::size_t max_json_depth = 32;
inline constexpr std::size_t max_stop_strings = 4;
inline constexpr std::size_t max_stop_bytes = 256;
/// /v1/completions' integer `logprobs` bound (OpenAI's); chat's
/// `top_logprobs` goes to actors::max_top_logprobs.
inline constexpr std::uint32_t max_completion_logprobs = 5;

/// One generation request, whichever API it came from.
struct generation_request {
  enum class kind : unsigned char { chat, completion };
  kind what = kind::completion;
  std::string model;
  std::vector<backends::chat_message> messages; ///< chat
  bool raw_prompt = true;                       ///< completion: prompt used as is (no template)
  std::string system;                           ///< Ollama generate: system message when templated
  std::string prompt_text;                      ///< completion, as text
  std::vector<backends::token_id> prompt_tokens; ///< completion, as token ids
  float temperature = 1.0f;
  std::uint32_t top_k = 0;
  float top_p = 1.0f;
  std::optional<std::uint64_t> seed;
  std::optional<std::uint32_t> max_tokens; ///< absent: up to the model's context
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stop;
  bool logprobs = false;          ///< report each generated token's log probability
  std::uint32_t top_logprobs = 0; ///< with this many alternatives per token
  bool stream = false;
  bool include_usage = false;
  actors::priority_class priority = actors::priority_class::interactive;
  std::string session; ///< optional client-chosen name; shows in `kvlane ps`
  tool_request tools;   ///< chat: the functions the model may call
  output_format format; ///< response_format (OpenAI), format (Ollama)
  /// Ollama's keep_alive: how long the model stays loaded after this request
  /// (none: its configured keep_alive).
  std::optional<actors::keep_alive> keep_alive;

  /// No prompt at all: Ollama's way of loading (or, with keep_alive 0, unloading) a model.
  bool empty() const noexcept {
    return what == kind::chat ? messages.empty()
                              : prompt_text.empty() && prompt_tokens.empty() && system.empty();
  }
};

expected<generation_request, api_error> decode_chat_completion(std::string_view body);
expected<generation_request, api_error> decode_completion(std::string_view body);
expected<generation_request, api_error> decode_ollama_generate(std::string_view body);
expected<generation_request, api_error> decode_ollama_chat(std::string_view body);

/// llama-server's POST /tokenize: {"content": "...", "add_special": false}.
struct tokenize_request {
  std::string content;
  bool add_special = false;
  std::string model; ///< optional; empty = the first model
};
expected<tokenize_request, api_error> decode_tokenize(std::string_view body);

/// llama-server's POST /detokenize: {"tokens": [1, 2, 3]}.
struct detokenize_request {
  std::vector<backends::token_id> tokens;
  std::string model;
};
expected<detokenize_request, api_error> decode_detokenize(std::string_view body);

/// Ollama's POST /api/show and similar bodies that only name a model.
expected<std::string, api_error> decode_model_name(std::string_view body);

/// `body` as a JSON object, its nesting bounded by max_json_depth; else 400 invalid_json.
/// For the decoders of other endpoints (embeddings_request).
expected<nlohmann::json, api_error> parse_json_object(std::string_view body);

} // namespace kvlane::daemon::http
