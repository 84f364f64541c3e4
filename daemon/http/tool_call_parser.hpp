#pragma once

// kvlane::daemon::http::tool_call_parser — a model's generated text split, as it streams, into
// answer text and tool calls written in the chat format's syntax (tool_grammar.hpp).
//
// Problem it solves: a client must see tool calls as calls (OpenAI's tool_calls, Ollama's
// message.tool_calls) and never as content, and a stream should show a call's name as soon
// as it is written and its arguments as they are generated. The parser holds back text that
// may be the start of a call's opening (the trigger), and once a call has opened it reads its
// envelope incrementally: the name when complete, then the arguments' bytes as they come,
// then the call's end. A call written in another key order or spacing (a model not held to
// the grammar) is read whole when it closes. Text after an opening that is not a call (it
// never parses) is given back as text, so nothing is lost; whitespace between calls, and
// after the last one, is dropped, and so is a call cut short (max_tokens) before its name.
//
// Not thread-safe; one per answer.

#include "backends/chat_format.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon::http {

struct tool_call_event {
  enum class kind : unsigned char {
    text,      ///< `text`: answer text
    begin,     ///< a call opened: `index`, `id`, `text` = the function's name
    arguments, ///< `text`: the next bytes of call `index`'s arguments (JSON)
    end,       ///< call `index` is complete; `text` = its whole arguments
  };
  kind k = kind::text;
  std::size_t index = 0;
  std::string id;
  std::string text;
};

class tool_call_parser {
public:
  /// Calls get ids `id_prefix` + their index.
  tool_call_parser(backends::tool_call_syntax syntax, std::string id_prefix);

  /// Appends the events `text` completes to `out`.
  void feed(std::string_view text, std::vector<tool_call_event>& out);
  /// The text ended: what is held is given out (a call cut short ends with the arguments
  /// it has; one cut short before its name is dropped; text that may have been an opening
  /// is text).
  void finish(std::vector<tool_call_event>& out);
  /// Calls begun so far.
  std::size_t calls() const noexcept { return calls_; }

private:
  enum class mode : unsigned char { text, head, arguments, whole, tail };
  void step(std::vector<tool_call_event>& out);
  bool step_text(std::vector<tool_call_event>& out);
  bool step_head(std::vector<tool_call_event>& out);
  bool step_arguments(std::vector<tool_call_event>& out);
  bool step_whole(std::vector<tool_call_event>& out);
  bool step_tail(std::vector<tool_call_event>& out);
  void begin_call(std::string name, std::vector<tool_call_event>& out);
  /// The opening and the first `n` bytes of buf_ were not a call: out as text.
  void give_back(std::size_t n, std::vector<tool_call_event>& out);
  /// Scans `c` as JSON, tracking strings and nesting; true when it closes depth 0.
  bool closes(char c) noexcept;

  backends::tool_call_syntax syntax_;
  std::string trigger_;
  std::string id_prefix_;
  mode mode_ = mode::text;
  std::string buf_;  ///< text not yet consumed by the current mode
  std::string raw_;  ///< the current call's text from its opening (given back if it fails)
  std::string args_; ///< the current call's arguments so far
  bool after_call_ = false;     ///< only whitespace since the last call ended
  bool envelope_open_ = false;  ///< tail: the call's JSON object is not closed yet
  // Arguments scanning: nesting depth, inside a string, after a backslash.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, started_ = false, scalar_ = false;
  std::size_t scan_ = 0; ///< whole: bytes of buf_ scanned; npos until the object's '{' is found
  std::size_t calls_ = 0;
};

} // namespace kvlane::daemon::http
