#pragma once

// kvlane — temp_dir: a fresh private directory, removed with its contents.
//
// Problem it solves: the bench gives each kvlaned child its own runtime
// directory and configuration file, and tests need scratch space; both need a
// unique directory (mkdtemp, mode 0700) that disappears however the scope ends.
//
// Threading: a value; one thread at a time.

#include "common/expected.hpp"

#include <string>
#include <string_view>

namespace kvlane {

class temp_dir {
public:
  /// A new directory `$TMPDIR/<prefix>-XXXXXX` (/tmp without TMPDIR).
  static expected<temp_dir, std::string> create(std::string_view prefix);

  temp_dir(temp_dir&& o) noexcept;
  temp_dir& operator=(temp_dir&& o) noexcept;
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir();

  const std::string& path() const noexcept { return path_; }

  /// Writes `content` to path()/name (replacing it); returns the file's path.
  expected<std::string, std::string> write(std::string_view name, std::string_view content) const;

private:
  explicit temp_dir(std::string path) noexcept : path_(std::move(path)) {}
  void remove() noexcept;

  std::string path_;
};

} // namespace kvlane
