#include "tools/bench/http_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kvlane::tools::bench {

namespace {

using clock = http_client::clock;

/// Milliseconds left until `deadline` for poll(), rounded up; 0 when past.
int poll_ms(clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1'000'000'000));
}

/// Waits for `events` on `fd` until `deadline`: 1 ready, 0 timed out, -1 error.
int wait_fd(int fd, short events, clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ms = poll_ms(deadline);
    const int r = ::poll(&p, 1, ms);
    if (r > 0)
      return 1;
    if (r == 0) {
      if (ms == 0 || clock::now() >= deadline)
        return 0;
      continue; // woke before the deadline (rounding): wait again
    }
    if (errno != EINTR)
      return -1;
  }
}

std::string errno_text(int e) {
  return std::strerror(e);
}

} // namespace

expected<http_endpoint, std::string> parse_http_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, 8) == "https://")
    return unexpected(fmt::format("'{}': https is not supported (the race runs on loopback)", url));
  if (url.substr(0, scheme.size()) != scheme)
    return unexpected(fmt::format("'{}': expected http://HOST:PORT", url));
  auto rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/')
    rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos)
    return unexpected(fmt::format("'{}': give the server's root (http://HOST:PORT), no path", url));
  http_endpoint ep;
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos)
      return unexpected(fmt::format("'{}': unclosed '[' in the host", url));
    ep.host = std::string{rest.substr(1, close - 1)};
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return unexpected(fmt::format("'{}': expected ':PORT' after the host", url));
      port_text = rest.substr(1);
    }
  } else {
    const auto colon = rest.rfind(':');
    ep.host = std::string{rest.substr(0, colon)};
    if (colon != std::string_view::npos)
      port_text = rest.substr(colon + 1);
  }
  if (ep.host.empty())
    return unexpected(fmt::format("'{}': no host", url));
  ep.port = 80;
  if (!port_text.empty() || rest.find(':') != std::string_view::npos) {
    unsigned port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_text.empty() || ec != std::errc{} || p != port_text.data() + port_text.size()
        || port == 0 || port > 65535)
      return unexpected(fmt::format("'{}': the port must be 1..65535", url));
    ep.port = static_cast<std::uint16_t>(port);
  }
  return ep;
}

http_client::http_client(http_endpoint ep, std::size_t max_idle)
  : ep_(std::move(ep)), max_idle_(max_idle) {}

http_client::~http_client() {
  close_idle();
}

void http_client::close_idle() {
  std::vector<int> fds;
  {
    std::lock_guard lock{mutex_};
    fds.swap(idle_);
  }
  for (int fd : fds)
    ::close(fd);
}

expected<int, std::string> http_client::connect_fd(clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const auto port = std::to_string(ep_.port);
  if (int rc = ::getaddrinfo(ep_.host.c_str(), port.c_str(), &hints, &list); rc != 0)
    return unexpected(fmt::format("cannot resolve '{}': {}", ep_.host, ::gai_strerror(rc)));
  std::string last = "no address";
  for (auto* a = list; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            a->ai_protocol);
    if (fd < 0) {
      last = errno_text(errno);
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const int w = wait_fd(fd, POLLOUT, deadline);
      int err = 0;
      socklen_t len = sizeof err;
      if (w == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
        rc = 0;
      else
        errno = w == 0 ? ETIMEDOUT : (err != 0 ? err : errno);
    }
    if (rc == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::freeaddrinfo(list);
      return fd;
    }
    last = errno_text(errno);
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return unexpected(fmt::format("cannot connect to {}:{}: {}", ep_.host, ep_.port, last));
}

expected<http_head, http_client::attempt_error> http_client::attempt(
  int fd, bool reused, const std::string& wire, bool head_request, clock::time_point deadline,
  const head_sink& on_head, const http_response_parser::body_sink& on_body, bool& keep) {
  keep = false;
  auto fail = [](std::string m, bool retryable = false) {
    return unexpected(attempt_error{std::move(m), retryable});
  };
  // Send.
  std::string_view out{wire};
  while (!out.empty()) {
    const auto n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int w = wait_fd(fd, POLLOUT, deadline);
      if (w == 0)
        return fail("timed out sending the request");
      if (w < 0)
        return fail("poll: " + errno_text(errno));
      continue;
    }
    return fail("send: " + errno_text(errno), reused);
  }
  // Receive.
  http_response_parser parser{head_request};
  bool head_seen = false;
  std::uint64_t received = 0;
  char buf[64 * 1024];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        const int w = wait_fd(fd, POLLIN, deadline);
        if (w == 0)
          return fail(received == 0 ? "timed out waiting for the response"
                                    : "timed out inside the response");
        if (w < 0)
          return fail("poll: " + errno_text(errno));
        continue;
      }
      return fail("recv: " + errno_text(errno), reused && received == 0);
    }
    if (n == 0) {
      if (auto ok = parser.finish(); !ok)
        return fail(ok.error(), reused && received == 0);
      if (!head_seen && on_head)
        on_head(parser.head());
      return parser.head();
    }
    received += static_cast<std::uint64_t>(n);
    const std::string_view piece{buf, static_cast<std::size_t>(n)};
    // The head is handed over before the body bytes that follow it.
    auto ok = parser.feed(piece, [&](std::string_view body) {
      if (!head_seen) {
        head_seen = true;
        if (on_head)
          on_head(parser.head());
      }
      if (on_body)
        on_body(body);
    });
    if (!ok)
      return fail("malformed response: " + ok.error());
    if (parser.head_done() && !head_seen) {
      head_seen = true;
      if (on_head)
        on_head(parser.head());
    }
    if (parser.done()) {
      keep = parser.head().keep_alive() && parser.consumed() == piece.size();
      return parser.head();
    }
  }
}

expected<http_head, std::string> http_client::exchange(
  const http_request& req, clock::time_point deadline, const head_sink& on_head,
  const http_response_parser::body_sink& on_body) {
  std::string wire = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: kvlane-bench\r\n"
                                 "Accept: */*\r\n",
                                 req.method, req.path,
                                 ep_.host.find(':') != std::string::npos ? "[" + ep_.host + "]"
                                                                         : ep_.host,
                                 ep_.port);
  if (!req.body.empty() || (req.method != "GET" && req.method != "HEAD"))
    wire += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", req.content_type,
                        req.body.size());
  for (const auto& [name, value] : req.headers)
    wire += fmt::format("{}: {}\r\n", name, value);
  wire += "\r\n";
  wire += req.body;
  const bool head_request = req.method == "HEAD";

  bool fresh_only = false;
  for (;;) {
    int fd = -1;
    bool reused = false;
    if (!fresh_only) {
      std::lock_guard lock{mutex_};
      if (!idle_.empty()) {
        fd = idle_.back();
        idle_.pop_back();
        reused = true;
      }
    }
    if (fd < 0) {
      auto c = connect_fd(deadline);
      if (!c)
        return unexpected(std::move(c).error());
      fd = *c;
    }
    bool keep = false;
    auto r = attempt(fd, reused, wire, head_request, deadline, on_head, on_body, keep);
    if (r && keep) {
      std::lock_guard lock{mutex_};
      if (idle_.size() < max_idle_) {
        idle_.push_back(fd);
        fd = -1;
      }
    }
    if (fd >= 0)
      ::close(fd);
    if (r)
      return std::move(*r);
    if (r.error().retryable && reused) {
      fresh_only = true; // the server closed an idle connection: once more on a new one
      continue;
    }
    return unexpected(std::move(r).error().message);
  }
}

expected<http_client::response, std::string> http_client::fetch(const http_request& req,
                                                                 clock::time_point deadline,
                                                                 std::size_t max_body) {
  response out;
  auto head = exchange(req, deadline, nullptr, [&](std::string_view b) {
    if (out.body.size() < max_body)
      out.body.append(b.substr(0, max_body - out.body.size()));
  });
  if (!head)
    return unexpected(std::move(head).error());
  out.head = std::move(*head);
  return out;
}

} // namespace kvlane::tools::bench
