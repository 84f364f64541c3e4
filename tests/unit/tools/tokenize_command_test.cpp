#include "tools/tokenize_command.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using kvlane::tools::detokenize_main;
using kvlane::tools::tokenize_main;

namespace {

const std::string tiny = std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/fixtures/tiny";

struct result {
  int code;
  std::string out;
  std::string err;
};

result run(bool tokenize, std::vector<std::string_view> args, const std::string& stdin_text = {}) {
  std::istringstream in(stdin_text);
  std::ostringstream out;
  std::ostringstream err;
  const int code = tokenize ? tokenize_main(args, in, out, err) : detokenize_main(args, in, out, err);
  return {code, out.str(), err.str()};
}

} // namespace

TEST_CASE("tokenize command: by default recognises special tokens and adds the BOS, like HF encode") {
  const auto sut = run(true, {"--tokenizer", tiny, "hello<|im_end|>"});
  CHECK(sut.code == 0);
  CHECK(sut.out == "300 259 302\n");
}

TEST_CASE("tokenize command: --no-special adds no BOS and keeps special-token text as text") {
  const auto sut = run(true, {"--tokenizer", tiny, "--no-special", "--json", "-"}, "<|im_end|>");
  CHECK(sut.code == 0);
  CHECK(sut.out.starts_with("[60,124,"));
  CHECK(sut.out.find("302") == std::string::npos);
}

TEST_CASE("tokenize command: detokenize writes the raw bytes of ids given as arguments or a JSON array") {
  CHECK(run(false, {"--tokenizer", tiny, "300", "259", "263"}).out == "hello world");
  CHECK(run(false, {"--tokenizer", tiny}, "[259, 302,263]\n").out == "hello world");
}

TEST_CASE("tokenize command: bad usage exits 64 and an id outside the vocabulary exits 1") {
  CHECK(run(true, {"hello"}).code == 64);
  CHECK(run(true, {"--tokenizer", tiny, "--bogus"}).code == 64);
  CHECK(run(false, {"--tokenizer", tiny, "12x"}).code == 64);
  const auto outside = run(false, {"--tokenizer", tiny, "308"});
  CHECK(outside.code == 1);
  CHECK(outside.err == "kvlane: token id 308 is outside the vocabulary (size 308)\n");
  const auto missing = run(true, {"--tokenizer", "/nonexistent/model", "x"});
  CHECK(missing.code == 1);
  CHECK(missing.err.starts_with("kvlane: cannot read /nonexistent/model"));
}

TEST_CASE("tokenize command: --help and -h print the command's usage on stdout and exit 0") {
  for (const bool tokenize : {true, false}) {
    for (const std::string_view flag : {"--help", "-h"}) {
      CAPTURE(tokenize);
      CAPTURE(flag);
      // Before --tokenizer: help does not need one, and nothing is loaded.
      const auto sut = run(tokenize, {flag});
      CHECK(sut.code == 0);
      CHECK(sut.err.empty());
      CHECK(sut.out.starts_with(tokenize ? "usage: kvlane tokenize " : "usage: kvlane detokenize "));
    }
  }
}

TEST_CASE("tokenize command: an unknown option is a usage error on stderr, exit 64") {
  const auto sut = run(true, {"--tokenizer", tiny, "--frobnicate"});
  CHECK(sut.code == 64);
  CHECK(sut.out.empty());
  CHECK(sut.err.find("unknown option '--frobnicate'") != std::string::npos);
}
