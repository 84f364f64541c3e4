#pragma once

// Test helper over common/child_process (the code the tools use): a child
// that fails to start fails the running test case (REQUIRE).

#include "common/child_process.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::test {

using kvlane::child_process;

/// Starts `path` with `args`; `env` holds extra "NAME=value" entries.
inline child_process spawn(const std::string& path, std::vector<std::string> args,
                           std::vector<std::string> env = {}) {
  child_options o;
  o.args = std::move(args);
  o.set_env = std::move(env);
  auto c = child_process::start(path, std::move(o));
  REQUIRE_MESSAGE(c.has_value(), (c ? std::string{} : c.error()));
  return std::move(*c);
}

} // namespace kvlane::test
