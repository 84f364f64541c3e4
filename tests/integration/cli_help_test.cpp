// `kvlane COMMAND --help` and `-h`, run as the real binary: every subcommand
// prints its own usage on stdout, nothing on stderr, and exits 0, without a
// daemon (no socket is opened, no configuration or tokenizer is read).
#include "tests/support/child_process.hpp"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using kvlane::test::spawn;

namespace {

// Every subcommand of `kvlane` (tools/cli.cpp, tools/admin_client.cpp).
const std::vector<std::string> subcommands{
  "run",    "chat",   "status",    "ps",      "cancel", "drain",    "resume",    "reload",
  "log-level", "metrics", "top", "cache", "probe", "tokenize", "detokenize"};

struct cli_result {
  int code = -1;
  std::string text; ///< stdout or stderr, as asked
};

/// Runs `kvlane args...` keeping only stdout (or only stderr), stdin at /dev/null.
cli_result run_cli(std::vector<std::string> args, bool keep_stdout) {
  std::vector<std::string> sh{"-c", keep_stdout ? "exec \"$@\" 2>/dev/null" : "exec \"$@\" >/dev/null",
                              "sh", KVLANE_CLI_PATH};
  sh.insert(sh.end(), args.begin(), args.end());
  // No daemon may answer: a command that tried to reach one would fail, not hang.
  auto p = spawn("/bin/sh", sh, {"KVLANE_SOCKET=/nonexistent/kvlane.sock",
                                 "XDG_RUNTIME_DIR=/nonexistent", "RUNTIME_DIRECTORY=/nonexistent"});
  auto rc = p.wait_exit(20s);
  REQUIRE(rc.has_value());
  return {*rc, p.output()};
}

} // namespace

TEST_CASE("kvlane CLI: every subcommand answers --help and -h with its own usage on stdout, exit 0") {
  std::map<std::string, std::string> usages;
  for (const auto& cmd : subcommands) {
    for (const std::string flag : {"--help", "-h"}) {
      CAPTURE(cmd);
      CAPTURE(flag);
      const auto out = run_cli({cmd, flag}, true);
      CAPTURE(out.text);
      CHECK(out.code == 0);
      CHECK(out.text.starts_with("usage: kvlane " + cmd + " "));
      const auto err = run_cli({cmd, flag}, false);
      CHECK(err.code == 0);
      CHECK(err.text.empty());
      if (flag == "--help")
        usages[cmd] = out.text;
      else
        CHECK(out.text == usages[cmd]); // -h and --help say the same
    }
  }
  // Each usage is the command's own: no two subcommands print the same text, and none
  // prints the command list of `kvlane --help`.
  const auto top = run_cli({"--help"}, true);
  CHECK(top.code == 0);
  CHECK(top.text.starts_with("usage: kvlane <command>"));
  for (const auto& [a, text_a] : usages) {
    CAPTURE(a);
    CHECK(text_a != top.text);
    for (const auto& [b, text_b] : usages)
      if (a < b) {
        CAPTURE(b);
        CHECK(text_a != text_b);
      }
  }
}

TEST_CASE("kvlane CLI: chat --help names --session and the chat commands") {
  const auto out = run_cli({"chat", "--help"}, true);
  CAPTURE(out.text);
  REQUIRE(out.code == 0);
  CHECK(out.text.find("--session NAME") != std::string::npos);
  CHECK(out.text.find("/bye") != std::string::npos);
  CHECK(out.text.find("/clear") != std::string::npos);
}

TEST_CASE("kvlane CLI: --help after other options still prints the usage and runs nothing") {
  // A full command line with --help last: nothing is sent or measured.
  const auto run = run_cli({"run", "--model", "m", "--max-tokens", "4", "hello", "--help"}, true);
  CHECK(run.code == 0);
  CHECK(run.text.starts_with("usage: kvlane run "));
  const auto probe = run_cli({"probe", "--config", "/nonexistent.toml", "-h"}, true);
  CHECK(probe.code == 0);
  CHECK(probe.text.starts_with("usage: kvlane probe "));
  const auto cancel = run_cli({"cancel", "7", "--help"}, true);
  CHECK(cancel.code == 0);
  CHECK(cancel.text.starts_with("usage: kvlane cancel "));
  const auto session = run_cli({"cache", "drop", "--session", "s", "-h"}, true);
  CHECK(session.code == 0);
  CHECK(session.text.starts_with("usage: kvlane cache "));
}

TEST_CASE("kvlane CLI: kvlane help COMMAND is kvlane COMMAND --help, an unknown command is a usage error") {
  for (const std::string cmd : {"chat", "status", "tokenize"}) {
    CAPTURE(cmd);
    const auto help = run_cli({"help", cmd}, true);
    CHECK(help.code == 0);
    CHECK(help.text == run_cli({cmd, "--help"}, true).text);
  }
  CHECK(run_cli({"help"}, true).text == run_cli({"--help"}, true).text);
  const auto unknown = run_cli({"help", "frobnicate"}, false);
  CHECK(unknown.code == 64);
  CHECK(unknown.text.find("unknown command 'frobnicate'") != std::string::npos);
}
