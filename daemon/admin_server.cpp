#include "daemon/admin_server.hpp"

#include "common/logging.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace kvlane::daemon {

namespace {

struct connection {
  int fd = -1;
  std::string buffer;
  bool discarding = false; ///< inside an over-long line: drop bytes up to the newline
};

// Writes all of `data`, waiting for the socket to drain up to `timeout`.
bool write_all(int fd, std::string_view data, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!data.empty()) {
    auto n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
  return true;
}

} // namespace

expected<std::unique_ptr<admin_server>, std::string>
admin_server::create(options opts, std::shared_ptr<const ipc::access_policy> policy, handler h) {
  sockaddr_un addr{};
  if (opts.path.size() >= sizeof addr.sun_path)
    return unexpected(fmt::format("admin socket path too long: {}", opts.path));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return unexpected(fmt::format("admin socket: {}", std::strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, opts.path.c_str(), opts.path.size() + 1);
  ::unlink(opts.path.c_str()); // a stale socket from a crashed daemon
  // Bind under a restrictive umask so the socket never exists with looser bits.
  auto old_mask = ::umask(0777 & ~opts.socket_mode);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0 || ::chmod(opts.path.c_str(), opts.socket_mode) != 0 || ::listen(fd, 16) != 0) {
    auto err = fmt::format("admin socket {}: {}", opts.path,
                           std::strerror(rc != 0 ? bind_errno : errno));
    ::close(fd);
    return unexpected(err);
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    ::unlink(opts.path.c_str());
    return unexpected(fmt::format("eventfd: {}", std::strerror(errno)));
  }
  return std::unique_ptr<admin_server>{
    new admin_server(std::move(opts), fd, wake, std::move(policy), std::move(h))};
}

admin_server::admin_server(options opts, int listen_fd, int wake_fd,
                           std::shared_ptr<const ipc::access_policy> policy, handler h)
  : opts_(std::move(opts)), listen_fd_(listen_fd), wake_fd_(wake_fd), policy_(std::move(policy)),
    handler_(std::move(h)) {
  thread_ = std::thread{[this] { run(); }};
}

admin_server::~admin_server() {
  stop_ = true;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(opts_.path.c_str());
}

void admin_server::set_policy(std::shared_ptr<const ipc::access_policy> policy) {
  std::lock_guard lock{policy_mutex_};
  policy_ = std::move(policy);
}

std::shared_ptr<const ipc::access_policy> admin_server::policy() const {
  std::lock_guard lock{policy_mutex_};
  return policy_;
}

void admin_server::run() {
  auto log = logging::get("admin");
  std::vector<connection> conns;
  auto close_conn = [&](std::size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  auto reply = [&](connection& c, const std::string& line) {
    return write_all(c.fd, line + "\n", opts_.write_timeout);
  };
  while (!stop_) {
    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& c : conns)
      fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
      log->error("admin socket poll: {}", std::strerror(errno));
      return;
    }
    if (stop_)
      break;
    // Serve existing connections first (indices shift when one closes).
    for (std::size_t i = conns.size(); i-- > 0;) {
      if (!(fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      auto& c = conns[i];
      char buf[4096];
      auto n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_conn(i);
        continue;
      }
      if (n < 0)
        continue;
      bool alive = true;
      for (std::string_view data{buf, static_cast<std::size_t>(n)}; alive && !data.empty();) {
        auto nl = data.find('\n');
        auto part = data.substr(0, nl);
        if (c.discarding) {
          if (nl != std::string_view::npos)
            c.discarding = false;
        } else if (c.buffer.size() + part.size() > opts_.max_line) {
          c.buffer.clear();
          c.discarding = nl == std::string_view::npos;
          alive = reply(c, fmt::format(R"({{"error":{{"code":"too_long","message":"request line longer than {} bytes"}}}})",
                                       opts_.max_line));
        } else {
          c.buffer.append(part);
          if (nl != std::string_view::npos) {
            std::string line;
            line.swap(c.buffer);
            if (!line.empty() && line.back() == '\r')
              line.pop_back();
            if (!line.empty())
              alive = reply(c, handler_(line));
          }
        }
        data.remove_prefix(nl == std::string_view::npos ? data.size() : nl + 1);
      }
      if (!alive)
        close_conn(i);
    }
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0)
        continue;
      auto peer = ipc::read_peer_credentials(fd);
      auto deny = [&](std::string_view why) {
        write_all(fd, fmt::format(R"({{"error":{{"code":"not_allowed","message":"{}"}}}})", why) + "\n",
                  opts_.write_timeout);
        ::close(fd);
      };
      if (!peer) {
        deny("cannot read peer credentials");
      } else if (!policy()->allows(*peer)) {
        log->warn("admin connection refused: {} is not an allowed admin",
                  ipc::access_policy::describe(*peer));
        deny("this user is not an allowed admin (see [admin] in kvlane.toml)");
      } else if (conns.size() >= opts_.max_connections) {
        deny("too many admin connections");
      } else {
        conns.push_back({fd, {}, false});
      }
    }
  }
  for (auto& c : conns)
    ::close(c.fd);
}

} // namespace kvlane::daemon
