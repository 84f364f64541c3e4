#pragma once

// kvlane::daemon::http tool calls — the `tools`, `tool_choice` and `parallel_tool_calls` of a
// chat request, and the tool calls of its assistant messages, read from untrusted JSON.
//
// Problem it solves: OpenAI's and Ollama's chat APIs carry function definitions and earlier
// calls in shapes that differ in small ways (OpenAI's call arguments are a JSON string,
// Ollama's an object; OpenAI has tool_choice, Ollama does not). These readers check every
// field, name the offending one in a 400, and produce the shapes the chat formats render
// (backends::chat_tool, backends::chat_tool_call). The parameter schemas are only checked to be
// objects here; they are compiled (and their unsupported keywords reported) when the
// request's output constraint is built (structured_output.hpp), which knows the model.
//
// Pure functions; safe from any thread.

#include "backends/chat_format.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace kvlane::daemon::http {

/// At most this many tools per request (OpenAI's limit).
inline constexpr std::size_t max_tools = 128;
/// A function name: 1 to 64 of [A-Za-z0-9_-] (OpenAI's rule; it also keeps names safe to
/// write into a prompt and a grammar literal).
inline constexpr std::size_t max_tool_name = 64;

struct tool_choice {
  enum class mode : unsigned char {
    automatic, ///< the model may answer in text or call tools ("auto", the default)
    none,      ///< the model answers in text; the tools are still shown to it
    required,  ///< the model calls at least one tool
    named,     ///< the model calls `name`
  };
  mode m = mode::automatic;
  std::string name; ///< named
};

/// A chat request's tools (empty: none) and how they may be used.
struct tool_request {
  std::vector<backends::chat_tool> tools;
  tool_choice choice;
  bool choice_given = false;
  bool parallel = true; ///< parallel_tool_calls: more than one call per answer
};

/// OpenAI's and Ollama's `tools`: [{"type": "function", "function": {"name", "description",
/// "parameters", "strict"}}]. Parameters default to an object without properties.
expected<std::vector<backends::chat_tool>, api_error> decode_tools(const nlohmann::ordered_json& v);

/// OpenAI's `tool_choice`: "auto" | "none" | "required" | {"type": "function", "function":
/// {"name": ...}}.
expected<tool_choice, api_error> decode_tool_choice(const nlohmann::ordered_json& v);

/// After every field is read: a tool_choice needs tools, and a named one must be among them.
expected<void, api_error> check_tool_request(const tool_request& t);

/// An assistant message's `tool_calls` at `param` ("messages[2].tool_calls"). OpenAI:
/// [{"id", "type": "function", "function": {"name", "arguments": "<JSON object text>"}}];
/// Ollama: [{"function": {"name", "arguments": {...}, "index"}, "id"}].
expected<std::vector<backends::chat_tool_call>, api_error>
decode_message_tool_calls(const nlohmann::ordered_json& v, const std::string& param, dialect d);

} // namespace kvlane::daemon::http
