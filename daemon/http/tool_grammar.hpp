#pragma once

// kvlane::daemon::http tool-call grammars — the GBNF a model's tool calls follow, in the
// model's own call syntax, with each function's arguments held to its parameter schema.
//
// Problem it solves: a tool call must parse (name known, arguments valid for that function's
// schema), and the call's envelope is the chat format's, not JSON alone. Each tool's schema
// is compiled to GBNF by the grammar library; its rules are renamed with a per-tool prefix
// and joined under one envelope rule per tool:
//   hermes:  <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>  ("\n" between calls)
//   llama3:  {"name": "f", "parameters": ARGS}
// (one optional space is allowed after each ':' and ',' of the envelope and a newline after
// <tool_call>, as models write them; ARGS is compact JSON). The grammar's language starts
// with the syntax's trigger, so the same grammar serves a call enforced from the first token
// and one enforced from its opening (output_constraint::triggers).
//
// Pure functions; safe from any thread.

#include "backends/chat_format.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"

#include <span>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {

/// The text a call opens with in the model's output ("<tool_call>", "{\"name\"").
std::string_view tool_call_trigger(backends::tool_call_syntax syntax) noexcept;

/// Whether `syntax` can write more than one call per answer (llama3 writes one).
bool supports_parallel_calls(backends::tool_call_syntax syntax) noexcept;

/// GBNF rules whose start rule is `start` (not `root`): calls to any of `tools`, one or
/// (`parallel` and the syntax allows it) several. Every other rule name starts with
/// `start` + "-". Error: a tool's parameters that do not compile (400 naming
/// "tools[i].function.parameters" and the compiler's JSON pointer and reason).
expected<std::string, api_error> tool_calls_gbnf(backends::tool_call_syntax syntax,
                                                 std::span<const backends::chat_tool> tools,
                                                 bool parallel, std::string_view start);

/// `gbnf` with every rule name (definitions and references) prefixed by `prefix`; string
/// literals, classes, repetition counts and comments are left alone.
std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix);

/// `text` as a GBNF string literal, quotes included.
std::string gbnf_literal(std::string_view text);

} // namespace kvlane::daemon::http
