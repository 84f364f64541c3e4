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
//   - tool_choice none: the format's grammar, if any; the tools are only shown. The answer is
//     read as content (never as calls), and when the syntax's opening is a single token of
//     the model's vocabulary (Qwen's <tool_call>), that token is banned from sampling
//     (none_banned_tokens).
// Errors are 400s in the API's shape naming the field: a schema keyword kvlane does not
// support (the compiler names it and its JSON pointer), tools for a model whose chat format
// or template has no tool syntax kvlane knows (the model named, and why).
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
#include <vector>

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

/// The constraint for a request's format and tools on `model`, whose chat format is `chat`
/// and whose tool calls are written in `syntax` (backends::tool_syntax_of the format and the
/// model's tokenizer); nullptr when its output is free text.
expected<std::shared_ptr<const actors::output_constraint>, api_error>
build_constraint(const output_format& format, const tool_request& tools, backends::chat_format chat,
                 backends::tool_call_syntax syntax, std::string_view model);

/// The same for a built-in format's own syntax (backends::tool_syntax_of(chat)).
expected<std::shared_ptr<const actors::output_constraint>, api_error>
build_constraint(const output_format& format, const tool_request& tools, backends::chat_format chat,
                 std::string_view model);

/// The tokens a request must never sample: with tools and tool_choice "none", the token
/// whose text is the whole opening of a call in `syntax` (tool_call_trigger), when `tok`'s
/// vocabulary has one as a special or added token (Qwen's <tool_call>); otherwise none.
std::vector<backends::token_id> none_banned_tokens(const tool_request& tools,
                                                   backends::tool_call_syntax syntax,
                                                   const backends::tokenizer& tok);

} // namespace kvlane::daemon::http
