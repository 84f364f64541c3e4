#pragma once

// kvlane::daemon::http::embeddings_request — the bodies of the embedding endpoints to
// validated requests.
//
// Problem it solves: like request_decoder, for POST /v1/embeddings (OpenAI), /api/embed
// (Ollama) and the legacy /api/embeddings: parse the untrusted JSON (nesting bounded),
// check every field, refuse what kvlane does not implement with a 400 naming the field,
// bound the number of inputs. Pure: the model, its context and its vocabulary are the
// caller's to check.

#include "actors/keep_alive.hpp"
#include "backends/backend.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon::http {

/// Inputs one request may hold (OpenAI's limit for an array `input`).
inline constexpr std::size_t max_embedding_inputs = 2048;
/// Tokens one request may hold in all, after truncation (OpenAI's limit).
inline constexpr std::size_t max_embedding_tokens = 300'000;

/// Which endpoint a request came from: it decides the answer's shape.
enum class embedding_api : unsigned char {
  openai,       ///< POST /v1/embeddings
  ollama,       ///< POST /api/embed
  ollama_legacy ///< POST /api/embeddings
};

struct embedding_request {
  embedding_api api = embedding_api::openai;
  std::string model;
  /// The inputs as text (tokenized with the model's tokenizer, BOS first when it has one)...
  std::vector<std::string> texts;
  /// ...or, OpenAI only, as token ids, used as they are. One of the two is empty; both are
  /// empty for an Ollama request without input (which loads the model: no embeddings).
  std::vector<std::vector<backends::token_id>> token_inputs;
  /// The inputs came as a list (errors name `input[i]`), not as one string or one array of
  /// token ids (errors name `input`).
  bool listed = false;
  bool base64 = false;                    ///< OpenAI encoding_format "base64"
  std::optional<std::uint32_t> dimensions; ///< asked for; must be the model's
  bool truncate = true;                   ///< Ollama: cut inputs over the context
  std::optional<std::uint32_t> num_ctx;   ///< Ollama options.num_ctx: a smaller context to cut to
  /// Ollama's keep_alive (none: the model's configured one).
  std::optional<actors::keep_alive> keep_alive;
};

expected<embedding_request, api_error> decode_openai_embeddings(std::string_view body);
expected<embedding_request, api_error> decode_ollama_embed(std::string_view body);
expected<embedding_request, api_error> decode_ollama_embeddings(std::string_view body);

} // namespace kvlane::daemon::http
