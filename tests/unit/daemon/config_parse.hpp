#pragma once

// What the config unit tests share: a minimal valid config to append
// snippets to, and parse() expected to succeed or to fail.

#include "daemon/config.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace kvlane::daemon::test {

// Lines 1-3; snippets appended to it start at line 4.
inline constexpr std::string_view minimal = "version = 1\n"
                                            "[[model]]\n"
                                            "name = \"m\"\n";

inline config parse_ok(std::string_view text) {
  auto sut = parse(text, "test.toml");
  if (!sut)
    FAIL("unexpected error: " << sut.error().message);
  return *sut;
}

/// The message of the error parse() must return for `text`.
inline std::string parse_error_message(std::string_view text) {
  auto sut = parse(text, "test.toml");
  REQUIRE_FALSE(sut.has_value());
  return sut.error().message;
}

} // namespace kvlane::daemon::test
