#pragma once

// kvlane chat — an interactive conversation with a model of kvlaned, like
// `ollama run`.
//
//   kvlane chat [--model M] [--session NAME] [--max-tokens N] [--temperature X]
//               [--top-k N] [--top-p X] [--seed N] [--socket PATH] [--timeout MS]
//
// Each line read is one turn, sent with the session name: the daemon keeps the
// history (daemon/session_table.hpp), so a turn sends only its own text and the
// retained KV of the previous turns is reused. A turn may span lines between
// `"""` markers. `/bye` (or end of input) leaves; `/clear` drops the session on
// the daemon; `/?` lists the commands. Ctrl-C cancels the answer being
// streamed and keeps the session (with what was shown); at the prompt it only
// says how to leave. Without --session the conversation gets a name of its
// own, dropped when the chat ends; a named session stays on the daemon for the
// next `kvlane chat --session NAME` (until it idles out).
//
// The prompt (">>> ") is shown only when the input is a terminal, so turns can
// be piped in: `printf 'hi\n/bye\n' | kvlane chat`. `--help` (`-h`) writes the
// usage to `out` and returns 0 without connecting.
//
// Exit codes: 0 after /bye or end of input, 1 the connection was lost, 64
// usage, 69 kvlaned is not running, 76 protocol/version mismatch, 77
// permission denied or user not allowed.

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools {

/// Splits input lines into turns and commands: a line is a turn or a command
/// (starting with '/'), except between `"""` markers, where lines are joined
/// into one turn. Blank lines outside a block are skipped.
class chat_reader {
public:
  enum class kind { none, turn, command };
  struct item {
    kind what = kind::none;
    std::string text; ///< the turn's text, or the command with its '/'
  };

  /// Feeds one line (without its newline); returns what became complete.
  item feed(std::string_view line);
  /// True while inside a `"""` block.
  bool open() const noexcept { return open_; }
  /// Ends the input: an unterminated block becomes a turn.
  item finish();

private:
  bool open_ = false;
  std::string block_;
};

int chat_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out,
              std::ostream& err, bool interactive);

} // namespace kvlane::tools
