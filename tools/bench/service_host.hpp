#pragma once

// kvlane::tools::bench — service_host: systemd's side of a kvlaned service,
// played by a program, so that a restart that keeps the snapshot store can be
// driven and measured without systemd.
//
// Problem it solves: kvlaned keeps its store across a restart by handing the
// arena and index memfds to systemd's file-descriptor store (FDSTORE=1 with
// FDNAME, as SCM_RIGHTS on NOTIFY_SOCKET) and taking them back at the next
// start (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID). The restart benchmark and
// the restart tests both need that protocol's other end:
//
// - notify_socket: the NOTIFY_SOCKET datagram socket. It reads the messages
//   as systemd's manager does: FDSTORE=1 keeps the passed descriptor under
//   its FDNAME (replacing one of the same name, where systemd would keep
//   both), FDSTOREREMOVE=1 closes it; any other passed descriptor is closed.
// - service: kvlaned started the way systemd starts it: NOTIFY_SOCKET, the
//   stored descriptors as 3, 4, ... with LISTEN_FDS and LISTEN_FDNAMES (or
//   none: a start that is handed nothing), LISTEN_PID written into the
//   child's environment between fork and exec, stdout and stderr to a log
//   file, killed if the thread that started it exits. stop() signals it and
//   waits for the exit on a pidfd, within a bound.
//
// Threading: each object is used by one thread at a time. A notify_socket
// must outlive the services started on it.

#include "common/expected.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>

namespace kvlane::tools::bench {

class notify_socket {
public:
  using clock = std::chrono::steady_clock;

  /// Binds a datagram socket at `path` (a file that must not exist yet).
  static expected<notify_socket, std::string> bind(std::string path);

  notify_socket(notify_socket&& other) noexcept;
  notify_socket& operator=(notify_socket&& other) noexcept;
  notify_socket(const notify_socket&) = delete;
  notify_socket& operator=(const notify_socket&) = delete;
  ~notify_socket();

  const std::string& path() const noexcept { return path_; }

  /// Handles datagrams until one carries the line `line` (e.g. "READY=1"):
  /// the moment it was read; nullopt when `timeout` passed first. Errors:
  /// the socket failed, or a FDSTORE=1 message did not carry one descriptor.
  expected<std::optional<clock::time_point>, std::string> wait_for(std::string_view line,
                                                                   std::chrono::milliseconds timeout);

  /// Handles every datagram already queued, without waiting (what a service
  /// sent while stopping, before the next start is given the store).
  expected<void, std::string> drain();

  /// Handles datagrams as they come until `stop_fd` (an eventfd or a pipe's
  /// read end) is readable. A running kvlaned sends STATUS= updates; a socket
  /// nobody reads fills up, and then its sends block the daemon's main thread,
  /// as they would if systemd stopped reading. Run it on a thread of its own
  /// while a service runs and nothing else uses this object (serve_thread).
  expected<void, std::string> serve_until(int stop_fd);

  /// The stored descriptors, by FDNAME (owned by this object).
  const std::map<std::string, int>& store() const noexcept { return store_; }

  /// Closes every stored descriptor: what a start after them is handed is nothing.
  void clear_store() noexcept;

private:
  notify_socket(std::string path, int fd) noexcept : path_(std::move(path)), fd_(fd) {}
  /// One datagram: its text, each line followed by '\n'.
  expected<std::string, std::string> receive();
  void close_all() noexcept;

  std::string path_;
  int fd_ = -1;
  std::map<std::string, int> store_;
};

class service {
public:
  using clock = std::chrono::steady_clock;

  struct options {
    std::string kvlaned_path; ///< the daemon binary
    std::string config_path;  ///< its --config
    std::string log_path;     ///< its stdout and stderr (truncated)
    bool pass_store = true;   ///< hand it the notify socket's stored descriptors
  };

  /// Starts kvlaned on `notify`. Fails when the log cannot be opened, more
  /// than 8 descriptors are stored, or fork fails; an exec failure shows as
  /// exit status 127.
  static expected<service, std::string> start(const options& opts, notify_socket& notify);

  service(service&& other) noexcept;
  service& operator=(service&& other) noexcept;
  service(const service&) = delete;
  service& operator=(const service&) = delete;
  /// A service still running is killed (SIGKILL) and reaped.
  ~service();

  pid_t pid() const noexcept { return pid_; }
  /// Just before fork.
  clock::time_point started() const noexcept { return started_; }
  bool running() const noexcept { return pid_ > 0; }

  /// Sends `sig` and waits for the exit within `timeout`; then SIGKILL. The
  /// exit status (a killed process: 128 + signal), or an error when it had
  /// to be killed after `timeout` or could not be waited for.
  expected<int, std::string> stop(int sig, std::chrono::milliseconds timeout);

  /// The exit status if it has exited (reaping it), without waiting.
  std::optional<int> exit_status();

private:
  service(pid_t pid, int pidfd, clock::time_point started) noexcept
    : pid_(pid), pidfd_(pidfd), started_(started) {}
  void kill_and_reap() noexcept;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  clock::time_point started_;
};

/// Reads a notify socket on a thread of its own for as long as it lives
/// (notify_socket::serve_until); the socket must not be used otherwise
/// meanwhile. stop() (or the destructor) ends it and joins it.
class serve_thread {
public:
  static expected<std::unique_ptr<serve_thread>, std::string> start(notify_socket& notify);
  serve_thread(const serve_thread&) = delete;
  serve_thread& operator=(const serve_thread&) = delete;
  ~serve_thread();

  /// Ends the thread; the first error it met, if any.
  expected<void, std::string> stop();

private:
  explicit serve_thread(int stop_fd) noexcept : stop_fd_(stop_fd) {}

  int stop_fd_ = -1;
  std::thread thread_;
  std::string error_; ///< written by the thread, read after join
};

/// The whole text of the file at `path` ("" if it cannot be read).
std::string read_text_file(const std::string& path);

} // namespace kvlane::tools::bench
