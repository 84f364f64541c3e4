#pragma once

// kvlane::daemon::admin_server — the admin socket: newline-delimited requests
// on a Unix stream socket, one response line per request line.
//
// The socket is created with `socket_mode` (0600 by default: only the
// daemon's user and root can even connect), and every connection's peer is
// checked against the admin access policy before it is served. Lines longer
// than `max_line` get an error response (code too_long) and are skipped to
// the next newline; the connection stays usable. A client that does not read
// its responses is disconnected after `write_timeout`.
//
// Threading: one thread of its own runs poll() over the listening socket and
// every connection and calls the handler there (handlers may block briefly).
// set_policy() is thread-safe. The destructor stops the thread, closes every
// connection and removes the socket file.

#include "common/expected.hpp"
#include "ipc/peer_access.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace kvlane::daemon {

class admin_server {
public:
  using handler = std::function<std::string(std::string_view line)>;

  struct options {
    std::string path;
    unsigned socket_mode = 0600;
    std::size_t max_line = 64 * 1024;
    unsigned max_connections = 16;
    std::chrono::milliseconds write_timeout{2000};
  };

  static expected<std::unique_ptr<admin_server>, std::string>
  create(options opts, std::shared_ptr<const ipc::access_policy> policy, handler h);

  ~admin_server();
  admin_server(const admin_server&) = delete;
  admin_server& operator=(const admin_server&) = delete;

  void set_policy(std::shared_ptr<const ipc::access_policy> policy);
  const std::string& path() const noexcept { return opts_.path; }

private:
  admin_server(options opts, int listen_fd, int wake_fd,
               std::shared_ptr<const ipc::access_policy> policy, handler h);
  void run();
  std::shared_ptr<const ipc::access_policy> policy() const;

  options opts_;
  int listen_fd_;
  int wake_fd_;
  mutable std::mutex policy_mutex_;
  std::shared_ptr<const ipc::access_policy> policy_;
  handler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace kvlane::daemon
