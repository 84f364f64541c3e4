#pragma once

// kvlane::backends::chat_format — turns a conversation into a model's prompt tokens.
//
// Problem it solves: an instruct model only follows a conversation written in
// the exact format it was trained on (its Jinja chat template). The model's own
// template is rendered by llama.cpp's Jinja engine (formats automatic and
// template, jinja/jinja_template.hpp); the formats of the model families kvlane
// serves are also built in, producing the same tokens as the templates:
//
//  - chatml (Qwen2.5, Qwen3 without tools or reasoning traces):
//      <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
//  - llama3 (the Llama-3 template, as shipped in the Llama-3.1 tokenizer copy kvlane is tested with):
//      <|begin_of_text|> then per message
//      <|start_header_id|>{role}<|end_header_id|>\n\n{trimmed content}<|eot_id|>
//      ... [<|start_header_id|>assistant<|end_header_id|>\n\n]
//  - exaone (EXAONE-3.x): a system turn first (an empty one when the
//      conversation has none), then [|{role}|]{content} followed by "\n" after
//      a user turn and [|endofturn|]\n after any other ... [[|assistant|]]
//
// Special tokens are emitted by id (looked up in the tokenizer by their text);
// message content is encoded with parse_special = false, so a user cannot
// inject a special token by writing its text. The text between two special
// tokens is encoded as one run, as Hugging Face does after splitting on
// special tokens, so the result equals encoding the template's rendering with
// special tokens recognised (for content free of special-token text).
//
// Stateless functions; safe from any thread.

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends {

/// template: the model's own Jinja template (tokenizer::apply_chat_template), rendered by
/// llama.cpp's Jinja engine; special tokens are read in the template's text only.
/// automatic: the model's template when its tokenizer carries one (a GGUF does); a model
/// without one gets a clear error at render time rather than a wrong prompt.
enum class chat_format : std::uint8_t { chatml, llama3, exaone, automatic, jinja };

/// "chatml", "llama3", "exaone", "auto" or "template".
std::string_view to_string(chat_format format) noexcept;

/// The format named `name` ("chatml" | "llama3" | "exaone" | "auto" | "template"), if any.
std::optional<chat_format> parse_chat_format(std::string_view name) noexcept;

/// The format a Jinja chat template (tokenizer_config.json chat_template, or
/// chat_template.jinja) writes, recognised by its markers: <|start_header_id|>
/// -> llama3, <|im_start|> -> chatml, [|endofturn|] -> exaone; nullopt if none.
std::optional<chat_format> detect_chat_format(std::string_view chat_template) noexcept;

/// A tool call an assistant message made (OpenAI's tool_calls[i], Ollama's likewise).
struct chat_tool_call {
  std::string id;        ///< may be empty (Ollama sends none)
  std::string name;      ///< the function's name
  std::string arguments; ///< a JSON object, as text
};

/// One message of a conversation; role is system, user, assistant or tool.
struct chat_message {
  std::string role;
  std::string content;
  std::vector<chat_tool_call> tool_calls{}; ///< assistant: the calls it made
  std::string tool_call_id{};               ///< tool: the call this result answers
  std::string tool_name{};                  ///< tool: the function that produced it, if known
};

/// A function the model may call (OpenAI's tools[i].function).
struct chat_tool {
  std::string name;
  std::string description;
  std::string parameters; ///< a JSON Schema object, as text (key order kept)
};

/// How a chat format writes a tool call in the model's output.
///  - hermes (chatml: Qwen2.5, Qwen3, Hermes): one call per block,
///      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, blocks separated by "\n";
///  - llama3 (Llama 3.1 and later): the whole answer is one JSON object,
///      {"name": "f", "parameters": {...}}.
/// none: the format has no tool syntax kvlane knows (exaone, a template of another family).
enum class tool_call_syntax : std::uint8_t { none, hermes, llama3 };

/// "none", "hermes" or "llama3".
std::string_view to_string(tool_call_syntax syntax) noexcept;

/// The tool syntax of `format` (automatic and jinja: none; they depend on the model's
/// template, see the overload below).
tool_call_syntax tool_syntax_of(chat_format format) noexcept;

/// The tool-call syntax a Jinja chat template teaches its model, read from the template's
/// text as llama.cpp's common/chat.cpp recognises formats:
///  - hermes: it writes calls as <tool_call> followed by a {"name": ..., "arguments": ...}
///    object (Qwen2.5, Qwen3, QwQ, Hermes 2 Pro and 3, Granite 4, MiMo), and not in one of
///    the XML shapes that also open with <tool_call> (<function=...> of Qwen3-Coder and
///    Qwen3.5, <arg_key> of GLM 4.6+, <invoke> of MiniMax);
///  - llama3: it has Llama 3's headers (<|start_header_id|>) and teaches the
///    {"name": ..., "parameters": ...} object (Llama 3.1, 3.2, 3.3), and is not one of the
///    other call formats written in those headers (Functionary's <function=...> and >>>
///    recipients, FireFunction's functools[...]);
///  - none otherwise (no template, a template without tools, a format kvlane does not know).
tool_call_syntax detect_tool_syntax(std::string_view chat_template) noexcept;

/// The tool syntax of `format` for a model whose tokenizer is `tok`: automatic and jinja
/// read it from the model's own template (detect_tool_syntax), the built-in formats have
/// their own.
tool_call_syntax tool_syntax_of(chat_format format, const tokenizer& tok) noexcept;

/// Renders messages as the model's template does: the format's special tokens
/// by id, message content encoded with parse_special = false, the BOS where
/// the template puts one, and the assistant header when add_generation_prompt.
/// Errors (invalid_argument): an unknown role (named, with the message index),
/// a special token the tokenizer lacks (named); for automatic and template, a model
/// without a chat template, or a template that fails (its own message).
expected<std::vector<token_id>, backend_error> render_chat(chat_format format, const tokenizer& tok,
                                                            std::span<const chat_message> messages,
                                                            bool add_generation_prompt);

/// The same with the functions the model may call, rendered as the model family's template
/// does (chatml as Qwen's: a "# Tools" system section, assistant calls in <tool_call> blocks,
/// tool results in <tool_response> blocks of a user turn; llama3 as Llama 3.1's: the tools
/// in the first user message, an assistant call as its JSON object, results in an ipython
/// turn; automatic and template: the model's own template is given them, as llama-server
/// gives them, see jinja_template.hpp). Errors (invalid_argument) besides render_chat's:
/// tools, tool calls or tool results in a format whose tool_syntax_of (for this tokenizer)
/// is none; a tool call's arguments or a tool's parameters that are not a JSON object;
/// llama3: more than one call in an assistant message, tools without a user message to
/// carry them; template: the template's own errors (e.g. Llama 3.1's "This model only
/// supports single tool-calls at once!").
expected<std::vector<token_id>, backend_error> render_chat(chat_format format, const tokenizer& tok,
                                                            std::span<const chat_message> messages,
                                                            std::span<const chat_tool> tools,
                                                            bool add_generation_prompt);

} // namespace kvlane::backends
