#include "tools/chat_command.hpp"

#include "ipc/protocol.hpp"
#include "tools/client_exit_code.hpp"

#include <kvlane/client.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <istream>
#include <optional>
#include <ostream>
#include <random>
#include <unistd.h>

namespace kvlane::tools {

namespace {

constexpr std::string_view block_marker = R"(""")";

constexpr const char* chat_help =
  "Available commands:\n"
  "  /clear   forget the conversation (drops the session on kvlaned)\n"
  "  /bye     leave\n"
  "  /?       this help\n"
  "\n"
  "Use \"\"\" to begin and end a message of several lines.\n"
  "Ctrl-C stops the answer being written; the conversation keeps what was shown.\n";

constexpr std::string_view chat_usage =
  "usage: kvlane chat [--model NAME] [--session NAME] [--max-tokens N] [--temperature X]\n"
  "                   [--top-k N] [--top-p X] [--seed N] [--socket PATH] [--timeout MS]\n"
  "talk with a model; kvlaned keeps the conversation. Each line is one turn; \"\"\" begins\n"
  "and ends a turn of several lines. /clear forgets the conversation, /bye (or end of\n"
  "input) leaves, /? lists the commands; Ctrl-C stops the answer being written.\n"
  "\n"
  "  --model NAME        model (default: the daemon's first model)\n"
  "  --session NAME      keep the conversation on kvlaned under NAME (1..64 of\n"
  "                      A-Z a-z 0-9 . _ -): `kvlane chat --session NAME` or\n"
  "                      `kvlane run --session NAME` continues it later. Without it\n"
  "                      the conversation is forgotten when the chat ends\n"
  "  --max-tokens N      tokens per answer at most (default 256)\n"
  "  --temperature X --top-k N --top-p X --seed N   sampling (default greedy)\n"
  "  --socket PATH       daemon socket (default $KVLANE_SOCKET, else\n"
  "                      /run/kvlane/kvlane.sock as root, else\n"
  "                      $XDG_RUNTIME_DIR/kvlane/kvlane.sock)\n"
  "  --timeout MS        cancel an answer when no token arrives for MS (default 60000)\n"
  "\n"
  "exit codes: 0 after /bye or end of input, 1 the connection was lost, 64 usage,\n"
  "  69 kvlaned is not running, 76 protocol/version mismatch, 77 permission denied\n"
  "  or user not allowed.\n";

std::atomic<bool> chat_interrupted{false};

extern "C" void on_chat_interrupt(int) {
  chat_interrupted = true;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

std::string fresh_session_name() {
  std::random_device rd;
  return fmt::format("chat-{}-{:08x}", ::getpid(), rd());
}

struct chat_options {
  client::connect_options connect;
  client::request request;
  bool named = false; ///< --session given: keep the session when leaving
  long timeout_ms = 60000;
};

enum class answer_status { done, failed, lost };

/// Streams one turn's answer to `out`; cancels it on Ctrl-C.
answer_status answer(client::connection& conn, const client::request& req, long timeout_ms,
                     std::ostream& out, std::ostream& err) {
  auto stream = conn.submit(req);
  if (!stream) {
    err << "error: " << stream.error().message << "\n";
    return stream.error().code == client::errc::connection_lost ? answer_status::lost
                                                                : answer_status::failed;
  }
  auto last = std::chrono::steady_clock::now();
  bool cancelled = false;
  bool at_line_start = true;
  for (;;) {
    if (chat_interrupted.exchange(false) && !cancelled) {
      (void)(*stream)->cancel();
      cancelled = true;
    }
    auto chunk = (*stream)->next(std::chrono::milliseconds(100));
    if (!chunk) {
      if (chunk.error().code == client::errc::timeout) {
        if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(timeout_ms)) {
          (void)(*stream)->cancel();
          err << fmt::format("\nerror: no token from kvlaned for {} ms; answer cancelled\n",
                             timeout_ms);
          return answer_status::failed;
        }
        continue;
      }
      if (!at_line_start)
        out << "\n";
      out.flush();
      err << "error: " << chunk.error().message << "\n";
      return chunk.error().code == client::errc::connection_lost ? answer_status::lost
                                                                 : answer_status::failed;
    }
    last = std::chrono::steady_clock::now();
    if (!chunk->text.empty()) {
      out << chunk->text;
      at_line_start = chunk->text.back() == '\n';
      out.flush();
    }
    if (!chunk->end)
      continue;
    if (!at_line_start)
      out << "\n";
    out.flush();
    const auto& e = *chunk->end;
    if (e.reason == client::end_reason::length || e.reason == client::end_reason::stop)
      return answer_status::done;
    if (e.reason == client::end_reason::cancelled && cancelled) {
      err << "(answer stopped; the conversation keeps what was shown)\n";
      return answer_status::done;
    }
    err << fmt::format("error: the answer ended: {}{}{}\n", client::to_string(e.reason),
                       e.message.empty() ? "" : ": ", e.message);
    return answer_status::failed;
  }
}

} // namespace

chat_reader::item chat_reader::feed(std::string_view line) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  if (open_) {
    if (line.ends_with(block_marker)) {
      line.remove_suffix(block_marker.size());
      if (line.empty() && !block_.empty() && block_.back() == '\n')
        block_.pop_back(); // a marker on a line of its own ends the previous line
      block_ += line;
      open_ = false;
      return {kind::turn, std::exchange(block_, {})};
    }
    block_ += line;
    block_ += '\n';
    return {};
  }
  if (line.starts_with(block_marker)) {
    line.remove_prefix(block_marker.size());
    if (line.size() >= block_marker.size() && line.ends_with(block_marker)) {
      line.remove_suffix(block_marker.size());
      return {kind::turn, std::string{line}};
    }
    open_ = true;
    block_ = line.empty() ? std::string{} : std::string{line} + "\n";
    return {};
  }
  const auto first = line.find_first_not_of(" \t");
  if (first == std::string_view::npos)
    return {};
  if (line[first] == '/') {
    auto cmd = line.substr(first);
    cmd = cmd.substr(0, cmd.find_last_not_of(" \t") + 1);
    return {kind::command, std::string{cmd}};
  }
  return {kind::turn, std::string{line}};
}

chat_reader::item chat_reader::finish() {
  if (!open_)
    return {};
  open_ = false;
  auto text = std::exchange(block_, {});
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  if (text.empty())
    return {};
  return {kind::turn, std::move(text)};
}

int chat_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out,
              std::ostream& err, bool interactive) {
  chat_options o;
  o.connect.client_name = "kvlane-chat";
  auto usage = [&](const std::string& message) {
    err << "kvlane: chat: " << message << "\n";
    return 64;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto a = args[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= args.size())
        return std::nullopt;
      return args[++i];
    };
    auto number = [&](auto& target, std::string_view what) -> bool {
      auto v = value();
      if (v && parse_number(*v, target))
        return true;
      usage(fmt::format("{} needs {}", a, what));
      return false;
    };
    if (a == "--help" || a == "-h") {
      out << chat_usage;
      return 0;
    } else if (a == "--model") {
      auto v = value();
      if (!v)
        return usage("--model needs a name");
      o.request.model = *v;
    } else if (a == "--session") {
      auto v = value();
      if (!v)
        return usage("--session needs a name");
      o.request.session = *v;
      o.named = true;
    } else if (a == "--socket") {
      auto v = value();
      if (!v)
        return usage("--socket needs a path");
      o.connect.socket_path = *v;
    } else if (a == "--max-tokens") {
      if (!number(o.request.sampling.max_tokens, "a whole number"))
        return 64;
    } else if (a == "--temperature") {
      if (!number(o.request.sampling.temperature, "a number"))
        return 64;
    } else if (a == "--top-k") {
      if (!number(o.request.sampling.top_k, "a whole number"))
        return 64;
    } else if (a == "--top-p") {
      if (!number(o.request.sampling.top_p, "a number"))
        return 64;
    } else if (a == "--seed") {
      if (!number(o.request.sampling.seed, "a whole number"))
        return 64;
    } else if (a == "--timeout") {
      if (!number(o.timeout_ms, "milliseconds"))
        return 64;
    } else {
      return usage(fmt::format("unknown argument '{}' (kvlane chat --help lists the options)", a));
    }
  }
  if (!o.named)
    o.request.session = fresh_session_name();
  // Bad names are reported before the first turn is typed.
  if (!ipc::proto::valid_session_name(o.request.session))
    return usage("--session needs 1 to 64 characters from A-Z a-z 0-9 . _ -");
  if (!o.request.model.empty() && !valid_model_name(o.request.model))
    return usage("--model needs 1 to 64 characters from A-Z a-z 0-9 . _ -");

  auto conn = client::connect(o.connect);
  if (!conn) {
    err << "kvlane: " << conn.error().message << "\n";
    return client_exit_code(conn.error().code);
  }

  struct sigaction sa{};
  sa.sa_handler = on_chat_interrupt; // no SA_RESTART: Ctrl-C interrupts a read at the prompt
  ::sigaction(SIGINT, &sa, nullptr);

  chat_reader reader;
  int status = 0;
  bool leaving = false;
  std::string line;
  while (!leaving) {
    if (interactive) {
      out << (reader.open() ? "... " : ">>> ");
      out.flush();
    }
    if (!std::getline(in, line)) {
      if (chat_interrupted.exchange(false) && !in.bad()) {
        in.clear();
        std::clearerr(stdin);
        out << "\nUse /bye or Ctrl-D to leave.\n";
        continue;
      }
      auto last = reader.finish();
      if (last.what == chat_reader::kind::turn) {
        auto req = o.request;
        req.prompt = std::move(last.text);
        if (answer(**conn, req, o.timeout_ms, out, err) == answer_status::lost)
          status = 1;
      }
      break;
    }
    auto item = reader.feed(line);
    switch (item.what) {
      case chat_reader::kind::none: break;
      case chat_reader::kind::command:
        if (item.text == "/bye" || item.text == "/exit") {
          leaving = true;
        } else if (item.text == "/clear") {
          auto r = (*conn)->drop_session(o.request.session, o.request.model);
          if (!r) {
            err << "error: " << r.error().message << "\n";
            if (r.error().code == client::errc::connection_lost) {
              status = 1;
              leaving = true;
            }
          } else {
            out << "Cleared session context.\n";
          }
        } else if (item.text == "/?" || item.text == "/help") {
          out << chat_help;
        } else {
          err << fmt::format("Unknown command '{}'. Type /? for help\n", item.text);
        }
        break;
      case chat_reader::kind::turn: {
        auto req = o.request;
        req.prompt = std::move(item.text);
        chat_interrupted = false;
        if (answer(**conn, req, o.timeout_ms, out, err) == answer_status::lost) {
          status = 1;
          leaving = true;
        }
        break;
      }
    }
  }
  if (!o.named && (*conn)->connected())
    (void)(*conn)->drop_session(o.request.session, o.request.model);
  out.flush();
  return status;
}

} // namespace kvlane::tools
