#pragma once

// kvlane::backends::jinja_template — a model's own Jinja chat template, rendered by the
// Jinja engine of llama.cpp's common library (the one llama-server uses).
//
// Problem it solves: instruct models ship their prompt format as a Jinja template
// (tokenizer_config.json chat_template, a GGUF's tokenizer.chat_template). kvlane renders
// the common families with built-in formatters (chat_format.hpp); any other template is
// rendered here, so a model of an unknown family still gets exactly the prompt it was
// trained on — or a clear error, never a wrong prompt.
//
// Message content is marked as user input while the template runs (the engine tracks
// which output bytes came from input), so that a caller can read special tokens only in
// the template's own text: a user who writes "<|eot_id|>" gets those characters, not the
// token — as with kvlane's built-in formats.
//
// Tools, assistant tool calls and tool results reach the template as llama-server and
// Hugging Face pass them: `tools` is a list of {"type": "function", "function": {"name",
// "description", "parameters"}}, an assistant message carries "tool_calls" (each {"id",
// "type": "function", "function": {"name", "arguments"}} with the arguments as an object)
// only when it made calls, and a tool result has role "tool" with "tool_call_id" and "name"
// when known. Templates write tools and arguments through `tojson`, whose output the engine
// counts as template text, not input; so a string in a tool definition or in a call's
// arguments that holds a special token's text is refused (invalid_argument naming it)
// rather than turned into that token.
//
// Thread contract: parse() once; render() is safe from any thread (serialized inside: the
// engine's per-call state is not documented as thread-safe).

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::backends {

struct chat_message;
struct chat_tool;

/// A run of rendered prompt text: from the template itself, or from a message (input).
struct rendered_part {
  bool input = false;
  std::string text;
};

class jinja_template {
public:
  /// Parses `text`; bos and eos are the texts the template's bos_token and eos_token
  /// stand for. invalid_argument with the engine's reason when it does not parse.
  static expected<std::unique_ptr<jinja_template>, backend_error>
  parse(std::string_view text, std::string_view bos, std::string_view eos);

  ~jinja_template();
  jinja_template(const jinja_template&) = delete;
  jinja_template& operator=(const jinja_template&) = delete;

  /// The prompt text for `messages` (roles system, user, assistant, tool) and the functions
  /// `tools` the model may call, with the assistant's header when add_generation_prompt, in
  /// runs of template text and input text. `specials`: the texts no string of a tool or a
  /// call's arguments may hold (see above). invalid_argument with the template's own error
  /// (e.g. "Conversation roles must alternate") when it raises one; when a tool's parameters
  /// or a call's arguments are not a JSON object; when such a string holds a special text.
  expected<std::vector<rendered_part>, backend_error>
  render(std::span<const chat_message> messages, std::span<const chat_tool> tools,
         bool add_generation_prompt,
         std::span<const std::pair<std::string, token_id>> specials = {}) const;
  /// The same without tools.
  expected<std::vector<rendered_part>, backend_error> render(std::span<const chat_message> messages,
                                                             bool add_generation_prompt) const {
    return render(messages, {}, add_generation_prompt);
  }

  /// Prompt tokens of rendered parts, as Hugging Face tokenizes a rendered template: the
  /// text is split at special tokens — looked for in the template's own text only, never
  /// in input — and each run between them is encoded whole as plain text by `tok`.
  /// `specials`: the special tokens' texts and ids, longest text first.
  static std::vector<token_id> tokens_of(std::span<const rendered_part> parts, const tokenizer& tok,
                                         std::span<const std::pair<std::string, token_id>> specials);

private:
  struct impl;
  explicit jinja_template(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
  mutable std::mutex mutex_;
};

} // namespace kvlane::backends
