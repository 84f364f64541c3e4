#pragma once

// kvlane::daemon::http structured output — OpenAI's `response_format`, Ollama's `format` and a
// request's tools, turned into the grammar its output follows (actors::output_constraint).
//
// Problem it solves: the engine enforces one constraint per sequence; the APIs ask for JSON,
// a schema, tool calls or a mix. This is where the mix is decided:
//   - format only: the format's grammar from the first token;
//   - tools, tool_choice auto: free text until the model opens a call (the syntax's trigger),
//     then the calls' grammar; with a format too, the format or the calls from the first token;
//   - tools, tool_choice required or a named function: the calls from the first token (a
//     named function: exactly one call to it);
//   - tool_choice none: the format's grammar, if any; the tools are only shown.
// Errors are 400s in the API's shape naming the field: a schema keyword kvlane does not
// support (the compiler names it and its JSON pointer), tools for a model whose chat format
// has no tool syntax (the model named).
//
// Pure functions; safe from any thread.

#include "actors/output_constraint.hpp"
#include "backends/chat_format.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"
#include "daemon/http/tool_calls.hpp"

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {

/// What the text of an answer must be.
struct output_format {
  enum class kind : unsigned char { text, json_object, json_schema };
  kind k = kind::text;
  std::string schema; ///< json_schema: the schema as JSON text
  std::string param;  ///< the request field it came from, for errors ("response_format")
};

/// OpenAI's `response_format`: {"type": "text"} | {"type": "json_object"} | {"type":
/// "json_schema", "json_schema": {"name", "description", "schema", "strict"}}.
expected<output_format, api_error> decode_response_format(const nlohmann::ordered_json& v);

/// Ollama's `format`: "json", "" (none) or a JSON Schema object.
expected<output_format, api_error> decode_ollama_format(const nlohmann::ordered_json& v);

/// The constraint for a request's format and tools on `model` (whose chat format is
/// `chat`); nullptr when its output is free text.
expected<std::shared_ptr<const actors::output_constraint>, api_error>
build_constraint(const output_format& format, const tool_request& tools, backends::chat_format chat,
                 std::string_view model);

} // namespace kvlane::daemon::http
