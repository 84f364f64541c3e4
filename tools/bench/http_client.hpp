#pragma once

// kvlane::tools::bench — http_client: blocking HTTP/1.1 requests over TCP, with keep-alive.
//
// Problem it solves: the HTTP driver sends every request of a run from its own
// thread to a server on loopback and must see the response's bytes the moment
// they arrive (first-token times), bound every wait by the run's deadline,
// and not pay a TCP handshake per request when the server keeps connections
// open. http_client holds the server's address and a pool of idle keep-alive
// connections; exchange() takes one (or connects), writes the request, reads
// the response through http_parser and hands the head and each body piece to
// the caller as they come, then returns the connection to the pool if the
// response allows it. A request on a pooled connection that the server had
// closed meanwhile (nothing received) is sent again once on a fresh one.
//
// Threading: exchange() and fetch() may run on many threads at once; the pool
// is guarded by a mutex. Callbacks run on the calling thread.

#include "common/expected.hpp"
#include "tools/bench/http_parser.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::tools::bench {

struct http_endpoint {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
};

/// `http://HOST:PORT` (an optional trailing '/'; HOST a name, an IPv4
/// address or a bracketed IPv6 address; PORT default 80). https is refused.
expected<http_endpoint, std::string> parse_http_url(std::string_view url);

struct http_request {
  std::string method = "GET";
  std::string path = "/";
  std::string body;                  ///< sent with Content-Length when not empty (or not GET)
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers; ///< extra headers
};

class http_client {
public:
  using clock = std::chrono::steady_clock;
  using head_sink = std::function<void(const http_head&)>;

  explicit http_client(http_endpoint ep, std::size_t max_idle = 64);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  const http_endpoint& endpoint() const noexcept { return ep_; }

  /// Sends `req` and reads the whole response by `deadline`: `on_head` once
  /// the head is in, `on_body` with every body piece as it arrives. Returns the
  /// head, or an error that says what failed (connecting, sending, the
  /// connection closing early, a malformed response, the deadline).
  expected<http_head, std::string> exchange(const http_request& req, clock::time_point deadline,
                                            const head_sink& on_head,
                                            const http_response_parser::body_sink& on_body);

  struct response {
    http_head head;
    std::string body; ///< at most max_body bytes of it
  };
  /// exchange() keeping the body.
  expected<response, std::string> fetch(const http_request& req, clock::time_point deadline,
                                        std::size_t max_body = 1u << 20);

  /// Closes the idle connections.
  void close_idle();

private:
  struct attempt_error {
    std::string message;
    bool retryable = false; ///< a reused connection failed before any byte came back
  };
  expected<int, std::string> connect_fd(clock::time_point deadline);
  expected<http_head, attempt_error> attempt(int fd, bool reused, const std::string& wire,
                                             bool head_request, clock::time_point deadline,
                                             const head_sink& on_head,
                                             const http_response_parser::body_sink& on_body,
                                             bool& keep);

  http_endpoint ep_;
  std::size_t max_idle_;
  std::mutex mutex_;
  std::vector<int> idle_;
};

} // namespace kvlane::tools::bench
