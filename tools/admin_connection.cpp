#include "tools/admin_connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>

namespace kvlane::tools {

namespace {

using json = nlohmann::json;
using clock = std::chrono::steady_clock;

admin_error make_error(admin_errc code, std::string message) {
  return admin_error{code, std::move(message)};
}

std::string duration_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? fmt::format("{} s", d.count() / 1000)
                               : fmt::format("{} ms", d.count());
}

} // namespace

expected<admin_connection, admin_error> admin_connection::open(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return unexpected(make_error(admin_errc::io, "admin socket path too long: " + path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return unexpected(make_error(admin_errc::io, fmt::format("socket: {}", std::strerror(errno))));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED)
      return unexpected(make_error(
        admin_errc::not_running, fmt::format("kvlaned is not running (no admin socket at {})", path)));
    if (e == EACCES || e == EPERM)
      return unexpected(make_error(
        admin_errc::not_allowed,
        fmt::format("permission denied on {}: this user is not a kvlane admin", path)));
    return unexpected(
      make_error(admin_errc::io, fmt::format("cannot connect to {}: {}", path, std::strerror(e))));
  }
  return admin_connection{fd};
}

admin_connection::admin_connection(admin_connection&& o) noexcept
  : fd_(std::exchange(o.fd_, -1)), buffer_(std::move(o.buffer_)) {}

admin_connection& admin_connection::operator=(admin_connection&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    buffer_ = std::move(o.buffer_);
  }
  return *this;
}

admin_connection::~admin_connection() {
  if (fd_ >= 0)
    ::close(fd_);
}

expected<json, admin_error> admin_connection::ask(const json& request,
                                                  std::chrono::milliseconds timeout) {
  const auto closed = [] {
    return unexpected(make_error(admin_errc::io, "the daemon closed the admin connection"));
  };
  const auto line = request.dump() + "\n";
  if (::send(fd_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return closed();
  const auto deadline = clock::now() + timeout;
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      auto reply = json::parse(std::string_view{buffer_}.substr(0, nl), nullptr, false);
      buffer_.erase(0, nl + 1);
      if (reply.is_discarded() || !reply.is_object())
        return unexpected(make_error(admin_errc::malformed,
                                     "the daemon sent a malformed admin response"));
      return reply;
    }
    const auto left = std::max(
      std::chrono::milliseconds{0},
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()));
    pollfd p{fd_, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready <= 0) {
      const auto cmd = request.contains("cmd") ? request["cmd"].dump() : request.dump();
      return unexpected(make_error(admin_errc::timeout,
                                   fmt::format("the daemon did not answer {} within {}", cmd,
                                               duration_text(timeout))));
    }
    char chunk[65536];
    const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return closed();
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

expected<json, admin_error> admin_connection::command(std::string_view cmd,
                                                      std::chrono::milliseconds timeout) {
  auto reply = ask(json{{"cmd", cmd}}, timeout);
  if (!reply)
    return reply;
  if (auto e = reply->find("error"); e != reply->end())
    return unexpected(make_error(admin_errc::failed,
                                 fmt::format("admin '{}' failed: {}", cmd, e->dump())));
  return reply;
}

} // namespace kvlane::tools
