// [store.disk]: the snapshot store's disk tier (docs/config.md, [store.disk]).

#include "daemon/config.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::daemon;

namespace {

// Lines 1-3; snippets appended to it start at line 4.
constexpr std::string_view minimal = "version = 1\n"
                                     "[[model]]\n"
                                     "name = \"m\"\n";

kvlane::config_error parse_error(const std::string& text) {
  auto sut = parse(text, "test.toml");
  REQUIRE_FALSE(sut.has_value());
  return sut.error();
}

void check_error(const kvlane::config_error& e, std::string_view key, std::uint32_t line,
                 std::string_view what) {
  CAPTURE(e.message);
  CHECK(e.key == key);
  CHECK(e.line == line);
  CHECK(e.message.find("test.toml:" + std::to_string(line) + ": ") == 0);
  CHECK(e.message.find(key) != std::string::npos);
  CHECK(e.message.find(what) != std::string::npos);
}

} // namespace

TEST_CASE("config [store.disk]: absent, there is no disk tier") {
  auto sut = parse(minimal, "test.toml");
  REQUIRE(sut);
  CHECK(sut->store.disk.dir.empty());
  CHECK(sut->store.disk.max_bytes == 64ull << 30);
  CHECK(sut->store.disk.write_bytes_per_s == 256ull << 20);
}

TEST_CASE("config [store.disk]: dir, max_bytes and write_bytes_per_s are read") {
  auto sut = parse(std::string(minimal) + "[store.disk]\ndir = \"/var/cache/kvlane/kv\"\n"
                                           "max_bytes = \"100GiB\"\nwrite_bytes_per_s = \"1GiB\"\n",
                   "test.toml");
  REQUIRE(sut);
  CHECK(sut->store.disk.dir == "/var/cache/kvlane/kv");
  CHECK(sut->store.disk.max_bytes == 100ull << 30);
  CHECK(sut->store.disk.write_bytes_per_s == 1ull << 30);
}

TEST_CASE("config [store.disk]: bad values name the key and line") {
  SUBCASE("dir missing") {
    check_error(parse_error(std::string(minimal) + "[store.disk]\nmax_bytes = \"1GiB\"\n"),
                "store.disk.dir", 4, "required key is missing");
  }
  SUBCASE("a relative dir") {
    check_error(parse_error(std::string(minimal) + "[store.disk]\ndir = \"kv\"\n"),
                "store.disk.dir", 5, "must be an absolute path");
  }
  SUBCASE("an unknown key") {
    check_error(parse_error(std::string(minimal) + "[store.disk]\ndir = \"/kv\"\nmax_byte = 5\n"),
                "store.disk.max_byte", 6, "unknown key");
  }
  SUBCASE("a bandwidth below 1 MiB/s") {
    check_error(
      parse_error(std::string(minimal) + "[store.disk]\ndir = \"/kv\"\nwrite_bytes_per_s = 1000\n"),
      "store.disk.write_bytes_per_s", 6, "");
  }
  SUBCASE("a scalar for the table") {
    check_error(parse_error(std::string(minimal) + "[store]\ndisk = \"/kv\"\n"), "store.disk", 5,
                "expected table");
  }
}
