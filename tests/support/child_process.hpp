#pragma once

// A child process for integration tests: runs a binary with arguments,
// captures stdout and stderr (merged) through a pipe, and lets the test wait
// for a line to appear or for the process to exit, both with a deadline.
// No sleeps: waiting is poll() on the pipe and a pidfd-free waitpid loop
// driven by the pipe's EOF.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace kvlane::test {

class child_process {
public:
  /// `env`: extra "NAME=value" entries added to the inherited environment.
  child_process(const std::string& path, const std::vector<std::string>& args,
                const std::vector<std::string>& env = {});
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const noexcept { return pid_; }

  /// Reads output until a line containing `needle` arrives (true), or the
  /// child closes its output or the timeout passes (false).
  bool wait_for_output(std::string_view needle, std::chrono::milliseconds timeout);

  /// Sends a signal to the child.
  void signal(int sig);

  /// Waits for the child to exit, reading its output meanwhile. Returns the
  /// exit status (or 128 + signal), or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

  /// Everything the child printed so far.
  const std::string& output() const noexcept { return output_; }

private:
  bool read_some(int timeout_ms);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool eof_ = false;
  std::optional<int> status_;
  std::string output_;
  std::size_t scanned_ = 0;
};

/// A fresh directory under the build tree, removed with its contents on destruction.
class temp_dir {
public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const noexcept { return path_; }
  /// Writes `content` to path()/name and returns the full path.
  std::string write(const std::string& name, std::string_view content) const;

private:
  std::string path_;
};

} // namespace kvlane::test
