#pragma once

// kvlane — child_process: runs a program as a child process with its output captured.
//
// Problem it solves: the bench drives a kvlaned child, the bench's plot runs
// gnuplot, and the integration tests start the daemon, the CLI and test apps;
// all need the same careful fork/exec, output capture and bounded waits. One
// implementation:
//
// - The argv, the environment and every file descriptor are prepared before
//   fork(); after it the child makes only async-signal-safe calls until
//   execve(). An exec failure reaches the parent through a close-on-exec pipe,
//   so start() returns it as an error instead of a child that exits 127.
// - stdin is /dev/null; stdout and stderr go to one pipe that a reader thread
//   drains for the whole life of the child (a full pipe would block it). The
//   output is kept up to `max_output_bytes` (the oldest bytes are dropped
//   first), and each complete line can be handed to `on_line`.
// - The environment is this process's, minus `unset_env`, plus `set_env`. The
//   child starts with an empty signal mask and SIGPIPE at its default.
// - With `die_with_parent` the child is killed (SIGKILL) when the thread that
//   started it exits (PR_SET_PDEATHSIG): start children from a thread that
//   outlives them, normally the main thread.
// - The exit is observed through a pidfd; every wait has a deadline. A child
//   not reaped before destruction is killed with SIGKILL and reaped.
//
// Threading: one thread at a time calls the methods; `on_line` runs on the
// reader thread. Moving a child_process moves its state (the reader thread
// keeps running).

#include "common/expected.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace kvlane {

struct child_options {
  std::vector<std::string> args;      ///< argv[1...]; argv[0] is the program path
  std::vector<std::string> set_env;   ///< "NAME=value": added, or replacing an inherited NAME
  std::vector<std::string> unset_env; ///< NAMEs removed from the inherited environment
  bool die_with_parent = true;        ///< SIGKILL when the starting thread exits
  std::size_t max_output_bytes = 4u << 20; ///< output() keeps at most the last this many bytes
  /// Each complete line of output (without its '\n'), on the reader thread.
  /// A line longer than 64 KiB is handed over in 64 KiB pieces.
  std::function<void(std::string_view line)> on_line;
};

class child_process {
public:
  /// Starts `path` (no PATH search). Fails with a message that names what
  /// failed: the program cannot be executed, or a system call failed.
  static expected<child_process, std::string> start(const std::string& path,
                                                    child_options opts = {});

  child_process(child_process&&) noexcept;
  child_process& operator=(child_process&&) noexcept;
  ~child_process();

  pid_t pid() const noexcept;

  /// Waits for `needle` in the output after the end of the previous match
  /// (true), or until the child closes its output or `timeout` passes (false).
  bool wait_for_output(std::string_view needle, std::chrono::milliseconds timeout);

  /// Sends `sig` unless the child has been reaped.
  void signal(int sig);

  /// Closes our end of the child's output pipe, as a reader that goes away
  /// would: the child's next write to it fails with EPIPE (or SIGPIPE kills
  /// it). output() keeps what arrived before.
  void close_output();

  /// Waits for the child to exit and for its output to close (so that
  /// output() is complete), both within `timeout`. Returns the exit status
  /// (the exit code, or 128 + the signal that killed it), or nullopt if it has
  /// not exited in time. Once it has exited, the status is returned even if a
  /// descendant still holds its output open.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

  /// The exit status if the child has exited (reaping it), without waiting.
  std::optional<int> exit_status();

  /// SIGTERM; a second SIGTERM if it has not exited after `grace`; SIGKILL if
  /// it still runs `bound` later. Returns the exit status, or an error if it
  /// had to be killed.
  expected<int, std::string> stop(std::chrono::milliseconds grace,
                                  std::chrono::milliseconds bound);

  /// The output kept so far (see max_output_bytes).
  std::string output() const;

  /// The last `n` lines of the kept output (a final line without '\n' counts).
  std::vector<std::string> last_lines(std::size_t n) const;

private:
  struct state;
  explicit child_process(std::unique_ptr<state> s) noexcept;
  bool reap(std::chrono::milliseconds timeout);

  std::unique_ptr<state> s_;
};

} // namespace kvlane
