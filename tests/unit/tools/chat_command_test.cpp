#include "tools/chat_command.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using kvlane::tools::chat_main;

namespace {

struct result {
  int code;
  std::string out;
  std::string err;
};

/// chat_main with `args`; the socket does not exist, so a chat that tried to
/// connect would fail with 69 instead of printing anything on `out`.
result run(std::vector<std::string_view> args) {
  args.push_back("--socket");
  args.push_back("/nonexistent/kvlane.sock");
  std::istringstream in("/bye\n");
  std::ostringstream out;
  std::ostringstream err;
  const int code = chat_main(args, in, out, err, false);
  return {code, out.str(), err.str()};
}

} // namespace

TEST_CASE("chat command: --help and -h print the chat usage naming --session on stdout, exit 0") {
  for (const std::string_view flag : {"--help", "-h"}) {
    CAPTURE(flag);
    const auto sut = run({"--model", "m", flag});
    CHECK(sut.code == 0);
    CHECK(sut.err.empty());
    CHECK(sut.out.starts_with("usage: kvlane chat "));
    CHECK(sut.out.find("--session NAME") != std::string::npos);
  }
}

TEST_CASE("chat command: an unknown argument is a usage error that points at --help, exit 64") {
  const auto sut = run({"--frobnicate"});
  CHECK(sut.code == 64);
  CHECK(sut.out.empty());
  CHECK(sut.err.find("unknown argument '--frobnicate'") != std::string::npos);
  CHECK(sut.err.find("kvlane chat --help") != std::string::npos);
}

TEST_CASE("chat command: without a daemon the chat exits 69 and prints no usage") {
  // The baseline of the help test above: the same arguments without --help reach connect().
  const auto sut = run({"--model", "m"});
  CHECK(sut.code == 69);
  CHECK(sut.out.find("usage:") == std::string::npos);
}
