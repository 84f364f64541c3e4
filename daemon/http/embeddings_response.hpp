#pragma once

// kvlane::daemon::http::embeddings_response — the answers of the embedding endpoints.
//
// Problem it solves: an answer holds up to max_embedding_inputs vectors of thousands of
// floats each, so it is written straight into one string (floats in their shortest form that
// reads back exactly, e.g. 0.1 rather than 0.10000000149011612) instead of through a JSON
// tree. Pure; called on the thread that finished the embeddings (a render thread or the
// backend's worker), never on the HTTP thread.

#include "backends/backend.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {

/// Standard base64 (RFC 4648: A-Z a-z 0-9 + /, '=' padding) of `bytes`.
std::string base64_encode(std::span<const std::byte> bytes);

/// POST /v1/embeddings: {"object": "list", "data": [{"object": "embedding", "index": i,
/// "embedding": [floats] or "<base64 of little-endian float32>"}, ...], "model",
/// "usage": {"prompt_tokens", "total_tokens"}}.
std::string render_openai_embeddings(const backends::embeddings& e, bool base64,
                                     std::string_view model, std::uint64_t prompt_tokens);

/// POST /api/embed: {"model", "embeddings": [[floats], ...], "total_duration",
/// "load_duration": 0, "prompt_eval_count"}; durations in nanoseconds.
std::string render_ollama_embed(const backends::embeddings& e, std::string_view model,
                                std::uint64_t prompt_tokens, std::int64_t total_ns);

/// POST /api/embeddings: {"embedding": [floats]} (the first row; [] without one).
std::string render_ollama_embedding(const backends::embeddings& e);

} // namespace kvlane::daemon::http
