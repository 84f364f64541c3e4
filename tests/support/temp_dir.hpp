#pragma once

// Test helper over common/temp_dir (the code the tools use): a scratch
// directory per test; failing to create or write it fails the test (REQUIRE).

#include "common/temp_dir.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <utility>

namespace kvlane::test {

/// A fresh directory, removed with its contents at the end of the test.
class temp_dir {
public:
  temp_dir() : dir_(make()) {}
  const std::string& path() const noexcept { return dir_.path(); }
  /// Writes `content` to path()/name and returns the full path.
  std::string write(std::string_view name, std::string_view content) const {
    auto p = dir_.write(name, content);
    REQUIRE_MESSAGE(p.has_value(), (p ? std::string{} : p.error()));
    return *p;
  }

private:
  static kvlane::temp_dir make() {
    auto d = kvlane::temp_dir::create("kvlane-test");
    REQUIRE_MESSAGE(d.has_value(), (d ? std::string{} : d.error()));
    return std::move(*d);
  }
  kvlane::temp_dir dir_;
};

} // namespace kvlane::test
