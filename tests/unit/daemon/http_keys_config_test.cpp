// [[http.keys]]: one API key per identity. Every entry is validated where it is written:
// names unique and well formed, exactly one of key and key_file, a key file that can be read.
#include "daemon/config.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

using namespace kvlane::daemon;
using kvlane::config_error;

namespace {

// Lines 1-4; snippets appended to it start at line 5.
constexpr std::string_view head = "version = 1\n"
                                  "[[model]]\n"
                                  "name = \"m\"\n"
                                  "[http]\n";

config parse_ok(const std::string& text) {
  auto sut = parse(text, "test.toml");
  if (!sut)
    FAIL("unexpected error: " << sut.error().message);
  return *sut;
}

/// The error is `key` at `line` and its message, "test.toml:LINE: KEY: ...", says `what`.
void check_error(const std::string& text, std::string_view key, std::uint32_t line,
                 std::string_view what) {
  auto sut = parse(text, "test.toml");
  REQUIRE_FALSE(sut.has_value());
  const auto& e = sut.error();
  CAPTURE(e.message);
  CHECK(e.key == key);
  CHECK(e.line == line);
  CHECK(e.message.starts_with(fmt::format("test.toml:{}: {}: ", line, key)));
  CHECK(e.message.find(what) != std::string::npos);
}

} // namespace

TEST_CASE("http keys config: without [[http.keys]] there are no keys") {
  CHECK(parse_ok(std::string{head}).http.keys.empty());
}

TEST_CASE("http keys config: every key of an entry is read, a key file's first line is its key") {
  kvlane::test::temp_dir dir;
  const auto file = dir.write("bob.key", "  sk-bob-from-file \nsecond line ignored\n");
  const auto sut = parse_ok(fmt::format(R"({}[[http.keys]]
name = "alice"
key = "sk-alice"
max_priority = "batch"
max_requests = 3
scope = "all"
[[http.keys]]
name = "bob.2"
key_file = "{}"
)",
                                        head, file));
  REQUIRE(sut.http.keys.size() == 2);
  const auto& a = sut.http.keys[0];
  CHECK(a.name == "alice");
  CHECK(a.key == "sk-alice");
  CHECK(a.key_file.empty());
  CHECK(a.batch_only);
  CHECK(a.max_requests == 3u);
  CHECK(a.share_all);
  const auto& b = sut.http.keys[1];
  CHECK(b.name == "bob.2");
  CHECK(b.key == "sk-bob-from-file");
  CHECK(b.key_file == file);
  CHECK_FALSE(b.batch_only);         // default max_priority: interactive
  CHECK_FALSE(b.max_requests);       // default: [clients] max_requests_per_user
  CHECK_FALSE(b.share_all);          // default scope: the key's own
}

TEST_CASE("http keys config: a duplicate name is an error at the second entry naming the first") {
  check_error(std::string{head} + "[[http.keys]]\nname = \"a\"\nkey = \"k1\"\n"
                                  "[[http.keys]]\nname = \"a\"\nkey = \"k2\"\n",
              "http.keys[1].name", 9, "duplicate key name \"a\" (also used by http.keys[0] at line 6)");
}

TEST_CASE("http keys config: the same key in two entries is an error that does not print the key") {
  const auto text = std::string{head} + "[[http.keys]]\nname = \"a\"\nkey = \"secret-1\"\n"
                                        "[[http.keys]]\nname = \"b\"\nkey = \"secret-1\"\n";
  check_error(text, "http.keys[1].key", 10, "the same key as http.keys[0] (\"a\")");
  CHECK(parse(text, "test.toml").error().message.find("secret-1") == std::string::npos);
}

TEST_CASE("http keys config: an entry with both key and key_file is an error") {
  check_error(std::string{head}
                + "[[http.keys]]\nname = \"a\"\nkey = \"k\"\nkey_file = \"/etc/kvlane/a.key\"\n",
              "http.keys[0].key_file", 8, "set key or key_file, not both");
}

TEST_CASE("http keys config: an entry with neither key nor key_file is an error at its table") {
  check_error(std::string{head} + "[[http.keys]]\nname = \"a\"\nmax_requests = 2\n",
              "http.keys[0].key", 5, "set key (the bearer key) or key_file");
}

TEST_CASE("http keys config: an unreadable key_file is an error naming the file and the reason") {
  kvlane::test::temp_dir dir;
  const auto missing = dir.path() + "/missing.key";
  check_error(fmt::format("{}[[http.keys]]\nname = \"a\"\nkey_file = \"{}\"\n", head, missing),
              "http.keys[0].key_file", 7,
              fmt::format("cannot read \"{}\": No such file or directory", missing));
  // A directory opens but cannot be read.
  check_error(fmt::format("{}[[http.keys]]\nname = \"a\"\nkey_file = \"{}\"\n", head, dir.path()),
              "http.keys[0].key_file", 7, fmt::format("cannot read \"{}\"", dir.path()));
  const auto empty = dir.write("empty.key", "\n");
  check_error(fmt::format("{}[[http.keys]]\nname = \"a\"\nkey_file = \"{}\"\n", head, empty),
              "http.keys[0].key_file", 7, "holds no key on its first line");
  check_error(std::string{head} + "[[http.keys]]\nname = \"a\"\nkey_file = \"keys/a\"\n",
              "http.keys[0].key_file", 7, "must be an absolute path");
}

TEST_CASE("http keys config: names and values are validated, each error naming its key") {
  const auto entry = [](std::string_view body) {
    return std::string{head} + "[[http.keys]]\n" + std::string{body};
  };
  check_error(entry("key = \"k\"\n"), "http.keys[0].name", 5, "required key is missing");
  check_error(entry("name = \"a b\"\nkey = \"k\"\n"), "http.keys[0].name", 6,
              "must be 1 to 64 characters from A-Z a-z 0-9 . _ -");
  check_error(entry("name = \"default\"\nkey = \"k\"\n"), "http.keys[0].name", 6,
              "\"default\" is reserved");
  check_error(entry("name = \"a\"\nkey = \"has space\"\n"), "http.keys[0].key", 7,
              "printable ASCII without spaces");
  check_error(entry("name = \"a\"\nkey = \"\"\n"), "http.keys[0].key", 7, "not empty");
  check_error(entry("name = \"a\"\nkey = \"k\"\nmax_priority = \"urgent\"\n"),
              "http.keys[0].max_priority", 8, "must be one of \"interactive\", \"batch\"");
  check_error(entry("name = \"a\"\nkey = \"k\"\nmax_requests = 0\n"), "http.keys[0].max_requests",
              8, "must be between 1 and 1048576 (got 0)");
  check_error(entry("name = \"a\"\nkey = \"k\"\nscope = \"team\"\n"), "http.keys[0].scope", 8,
              "must be one of \"user\", \"all\"");
  const auto unknown = parse(entry("name = \"a\"\nkey = \"k\"\nmax_sequences = 2\n"), "test.toml");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.starts_with("test.toml:8: unknown key 'http.keys[0].max_sequences'"));
  check_error(std::string{head} + "keys = \"k\"\n", "http.keys", 5,
              "expected array of tables ([[http.keys]])");
}
