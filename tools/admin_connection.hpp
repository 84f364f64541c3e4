#pragma once

// kvlane::tools — admin_connection: a client of kvlaned's admin socket.
//
// Problem it solves: the `kvlane` admin subcommands and kvlane-bench's IPC
// driver both ask a running daemon for its state; one client speaks the
// protocol (one JSON object per line each way, docs/admin.md): connect, send
// a request, read the one reply line within a deadline. JSON parse failures
// and socket errors become error values with messages for people.
//
// Threading: one thread at a time per connection; open one connection per thread.

#include "common/expected.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvlane::tools {

enum class admin_errc : std::uint8_t {
  not_running,    ///< no socket, or nobody listens on it
  not_allowed,    ///< the socket's permissions refuse this user
  io,             ///< any other socket failure, or the daemon closed the connection
  timeout,        ///< no reply within the deadline
  malformed,      ///< the reply is not one JSON object
  failed,         ///< the daemon answered {"error": {...}} (command() only)
};

struct admin_error {
  admin_errc code = admin_errc::io;
  std::string message;
};

class admin_connection {
public:
  /// Connects to the admin socket at `path`.
  static expected<admin_connection, admin_error> open(const std::string& path);

  admin_connection(admin_connection&& o) noexcept;
  admin_connection& operator=(admin_connection&& o) noexcept;
  admin_connection(const admin_connection&) = delete;
  admin_connection& operator=(const admin_connection&) = delete;
  ~admin_connection();

  /// Sends `request` and returns the reply object as the daemon sent it,
  /// including an {"error": ...} reply.
  expected<nlohmann::json, admin_error> ask(const nlohmann::json& request,
                                            std::chrono::milliseconds timeout);

  /// Sends {"cmd": cmd}; an {"error": ...} reply is an admin_errc::failed error.
  expected<nlohmann::json, admin_error> command(std::string_view cmd,
                                                std::chrono::milliseconds timeout);

private:
  explicit admin_connection(int fd) noexcept : fd_(fd) {}

  int fd_ = -1;
  std::string buffer_; ///< received bytes after the last reply line
};

} // namespace kvlane::tools
