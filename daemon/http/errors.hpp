#pragma once

// kvlane::daemon::http::api_error — an HTTP API error as a value.
//
// Every failure of a request becomes one api_error, rendered in the shape the
// client's API expects: OpenAI's {"error": {"message", "type", "param",
// "code"}} on /v1/* and the llama-server-style routes, Ollama's {"error": "..."}
// on /api/*.

#include <optional>
#include <string>

namespace kvlane::daemon::http {

enum class dialect : unsigned char { openai, ollama };

struct api_error {
  unsigned status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param; ///< the offending request field, dotted ("messages[1].role"); may be empty
  std::string code;  ///< machine-readable ("model_not_found"); may be empty
  std::optional<unsigned> retry_after; ///< seconds: the Retry-After header (429, 503)
};

/// 400 invalid_request_error naming `param`.
api_error invalid(std::string param, std::string message, std::string code = {});
/// 400 for a field this server does not implement.
api_error unsupported(std::string param, std::string why = {});

/// The JSON body for `e` in the API's shape.
std::string render(const api_error& e, dialect d);

} // namespace kvlane::daemon::http
