// The HTTP connection limits of a real kvlaned, each seen from a client that can tell the
// server closing its connection (EOF or reset) from its own read giving up: header and idle
// timeouts, 413 for bodies over max_body_bytes (Content-Length and chunked), max_connections,
// max_connections_per_peer (a peer over it gets 503, other peers are served), and responses
// over 8 MiB that reach a slow reader whole while a reader that stops is dropped.
#include "tests/integration/http_fixture.hpp"

#include <netinet/tcp.h>

#include <cerrno>
#include <thread>

using namespace kvlane::test::http;
using steady = std::chrono::steady_clock;

namespace {

constexpr auto header_timeout = 300ms; // http_config's header_timeout_ms
constexpr auto idle_timeout = 1000ms;

/// http_config plus [http] limits small enough to reach in a test.
std::string limits_config(const std::string& run_dir) {
  return http_config(run_dir) + R"(idle_timeout_ms = 1000
max_body_bytes = "64KiB"
max_connections = 6
max_connections_per_peer = 3
)";
}

/// The defaults' max_body_bytes (4 MiB), so that /tokenize can answer over 8 MiB.
std::string big_response_config(const std::string& run_dir) {
  return http_config(run_dir) + "idle_timeout_ms = 1000\n";
}

/// How a read ended.
enum class ending { data, closed, timed_out };

/// A client socket from a chosen loopback source address, whose reads tell the server's
/// close (EOF or reset) from a timeout.
class client {
public:
  explicit client(std::uint16_t port, const char* source = "127.0.0.1", int rcvbuf = 0)
    : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    if (rcvbuf > 0)
      REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) == 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, source, &from.sin_addr) == 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  }
  ~client() { ::close(fd_); }
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Sends all of `data`; false if the server closed or reset the connection on the way.
  bool send(std::string_view data) {
    while (!data.empty()) {
      const auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  /// Appends at most `max` bytes that arrive within `timeout`.
  ending read_some(std::string& out, std::chrono::milliseconds timeout, std::size_t max = 65536) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1)
      return ending::timed_out;
    std::string buf(max, '\0');
    const auto n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0)
      return ending::closed; // 0: EOF; -1: ECONNRESET
    out.append(buf.data(), static_cast<std::size_t>(n));
    return ending::data;
  }
  /// Reads until the server closes (closed) or `quiet` passes without a byte (timed_out).
  ending read_to_close(std::string& out, std::chrono::milliseconds quiet) {
    for (;;)
      if (const auto e = read_some(out, quiet); e != ending::data)
        return e;
  }
  /// One whole response to a request on this keep-alive connection.
  reply read_reply() {
    std::string raw;
    for (;;) {
      REQUIRE(read_some(raw, 20s) == ending::data);
      const auto end = raw.find("\r\n\r\n");
      if (end == std::string::npos)
        continue;
      const auto head = raw.substr(0, end);
      const auto at = head.find("Content-Length: ");
      REQUIRE(at != std::string::npos);
      if (raw.size() >= end + 4 + std::stoul(head.substr(at + 16)))
        return parse_reply(raw);
    }
  }

private:
  int fd_;
};

std::string get(std::string_view path, bool keep_alive = true) {
  return fmt::format("GET {} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n{}\r\n",
                     path, api_key, keep_alive ? "" : "Connection: close\r\n");
}

/// The status a new connection from `source` gets for GET /v1/models, retried while it is
/// refused (closed at accept, or 503): the server releases a closed connection's place when
/// it reads the EOF, which the client cannot observe. 0 if still refused after 20 s.
int status_once_released(std::uint16_t port, const char* source) {
  for (const auto until = steady::now() + 20s; steady::now() < until;
       std::this_thread::sleep_for(10ms)) {
    client c{port, source};
    c.send(get("/v1/models", false));
    std::string raw;
    c.read_to_close(raw, 20s);
    if (raw.empty())
      continue; // closed at accept
    if (const auto r = parse_reply(raw); r.status != 503)
      return r.status;
  }
  return 0;
}

} // namespace

TEST_CASE("http limits: a request whose headers stall is closed by the server after header_timeout_ms") {
  http_fixture d;
  const auto sent = steady::now(); // before the connect: no server clock starts earlier
  client slow{d.port};
  REQUIRE(slow.send("GET /health HTTP/1.1\r\nHost: localhost\r\n")); // never finishes its headers
  std::string got;
  // The bound: 20 header timeouts. A server that never closes fails with timed_out.
  CHECK(slow.read_to_close(got, 20 * header_timeout) == ending::closed);
  CHECK(steady::now() - sent >= header_timeout);
  CHECK(got.empty()); // no answer, just the close
}

TEST_CASE("http limits: a keep-alive connection with no request in flight is closed after idle_timeout_ms") {
  http_fixture d{limits_config};
  client c{d.port};
  const auto asked = steady::now(); // the idle time starts after the answer, so after this
  REQUIRE(c.send(get("/v1/models")));
  CHECK(c.read_reply().status == 200);
  std::string more;
  CHECK(c.read_to_close(more, 20 * idle_timeout) == ending::closed);
  CHECK(steady::now() - asked >= idle_timeout);
  CHECK(more.empty());

  // Before the connect: the server's idle clock cannot start earlier than this.
  const auto opened = steady::now();
  client silent{d.port}; // never sends a byte
  CHECK(silent.read_to_close(more, 20 * idle_timeout) == ending::closed);
  CHECK(steady::now() - opened >= idle_timeout);
}

TEST_CASE("http limits: a body over max_body_bytes gets 413, by Content-Length or chunked") {
  http_fixture d{limits_config};
  const std::string post = fmt::format(
    "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n"
    "Content-Type: application/json\r\n",
    api_key);

  // Announced: answered from the headers, before the body.
  {
    client c{d.port};
    REQUIRE(c.send(post + "Content-Length: 65537\r\n\r\n"));
    std::string raw;
    CHECK(c.read_to_close(raw, 20s) == ending::closed);
    const auto r = parse_reply(raw);
    CHECK(r.status == 413);
    CHECK(json::parse(r.body)["error"]["message"].get<std::string>().find("65536 bytes "
                                                                          "(max_body_bytes)")
          != std::string::npos);
  }
  // Chunked: counted as it arrives, 413 once past the limit.
  {
    client c{d.port};
    REQUIRE(c.send(post + "Transfer-Encoding: chunked\r\n\r\n"));
    const std::string chunk = fmt::format("{:x}\r\n{}\r\n", 4096, std::string(4096, ' '));
    for (int i = 0; i < 20 && c.send(chunk); ++i) { // 80 KiB; the server may stop reading
    }
    std::string raw;
    CHECK(c.read_to_close(raw, 20s) == ending::closed);
    const auto r = parse_reply(raw);
    CHECK(r.status == 413);
  }
  // Under the limit, the same request is served.
  const auto body = json{{"model", "tiny"}, {"prompt", "hi"}, {"max_tokens", 2}}.dump();
  client ok{d.port};
  REQUIRE(ok.send(post + fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body)));
  CHECK(ok.read_reply().status == 200);
}

TEST_CASE("http limits: past max_connections a connection is closed at accept, the open ones are served") {
  http_fixture d{limits_config}; // max_connections 6, max_connections_per_peer 3
  // Six connections from two peers, each answered once, so the server has counted them.
  std::vector<std::unique_ptr<client>> open;
  for (const char* source : {"127.0.0.1", "127.0.0.2"})
    for (int i = 0; i < 3; ++i) {
      open.push_back(std::make_unique<client>(d.port, source));
      REQUIRE(open.back()->send(get("/v1/models")));
      REQUIRE(open.back()->read_reply().status == 200);
    }
  {
    client over{d.port, "127.0.0.3"}; // a third peer: under its own cap, over the total
    over.send(get("/v1/models"));     // may fail: the server has closed it already
    std::string raw;
    CHECK(over.read_to_close(raw, 20s) == ending::closed);
    CHECK(raw.empty());
  }
  for (auto& c : open) { // still served
    REQUIRE(c->send(get("/v1/models")));
    CHECK(c->read_reply().status == 200);
  }
  CHECK(d.proc->wait_for_output("6 connections open (max_connections)", 20s));
  open.pop_back(); // closes one of 127.0.0.2's: its place is free again
  CHECK(status_once_released(d.port, "127.0.0.3") == 200);
}

TEST_CASE("http limits: a peer over max_connections_per_peer gets 503 with Retry-After, other peers are served") {
  http_fixture d{limits_config}; // max_connections_per_peer 3
  std::vector<std::unique_ptr<client>> mine;
  for (int i = 0; i < 3; ++i) {
    mine.push_back(std::make_unique<client>(d.port, "127.0.0.1"));
    REQUIRE(mine.back()->send(get("/v1/models")));
    REQUIRE(mine.back()->read_reply().status == 200);
  }
  for (int i = 0; i < 3; ++i) {
    client over{d.port, "127.0.0.1"};
    REQUIRE(over.send(get("/v1/models")));
    std::string raw;
    CHECK(over.read_to_close(raw, 20s) == ending::closed);
    const auto r = parse_reply(raw);
    CHECK(r.status == 503);
    CHECK(r.head.find("Retry-After: 1\r\n") != std::string::npos);
    CHECK(r.head.find("Connection: close\r\n") != std::string::npos);
    CHECK(json::parse(r.body)["error"]["code"] == "too_many_connections");
  }
  // Logged once for the three refusals (the log reaches the test through a pipe: wait for it).
  const std::string line = "127.0.0.1 has 3 connections open (max_connections_per_peer)";
  CHECK(d.proc->wait_for_output(line, 20s));
  const auto log = d.proc->output();
  const auto first = log.find(line);
  CHECK(first != std::string::npos);
  CHECK(log.find(line, first + 1) == std::string::npos);

  client other{d.port, "127.0.0.2"}; // another address is served
  REQUIRE(other.send(get("/v1/models")));
  CHECK(other.read_reply().status == 200);
  for (auto& c : mine) { // and so are the peer's own three
    REQUIRE(c->send(get("/v1/models")));
    CHECK(c->read_reply().status == 200);
  }
  mine.pop_back();
  CHECK(status_once_released(d.port, "127.0.0.1") == 200);
}

namespace {

/// POST /tokenize of `n` bytes: the byte tokenizer answers about 4 bytes of JSON per byte.
std::string tokenize_request(std::size_t n) {
  const auto body = json{{"model", "tiny"}, {"content", std::string(n, 'x')}}.dump();
  return fmt::format("POST /tokenize HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n"
                     "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                     api_key, body.size(), body);
}

constexpr std::size_t tokenize_bytes = 2'500'000; // a response of about 10 MB

} // namespace

TEST_CASE("http limits: a response over 8 MiB reaches a reader slower than idle_timeout_ms whole") {
  http_fixture d{big_response_config};
  // A small receive buffer, read 64 KiB at a time with pauses: the whole read takes several
  // idle timeouts, but no pause comes near one.
  client c{d.port, "127.0.0.1", 64 << 10};
  REQUIRE(c.send(tokenize_request(tokenize_bytes)));
  std::string raw;
  std::size_t want = 0;
  const auto started = steady::now();
  while (want == 0 || raw.size() < want) {
    REQUIRE(c.read_some(raw, 20s) == ending::data);
    if (const auto end = raw.find("\r\n\r\n"); want == 0 && end != std::string::npos) {
      const auto at = raw.find("Content-Length: ");
      REQUIRE(at < end);
      want = end + 4 + std::stoul(raw.substr(at + 16));
    }
    std::this_thread::sleep_for(idle_timeout / 50); // pacing the reader, not synchronising
  }
  CHECK(steady::now() - started > 2 * idle_timeout); // it was a slow reader
  const auto r = parse_reply(raw);
  CHECK(r.status == 200);
  CHECK(r.body.size() > (8u << 20));
  const auto tokens = json::parse(r.body)["tokens"];
  CHECK(tokens.size() == tokenize_bytes); // one per byte
  CHECK(tokens.back() == static_cast<int>('x'));
}

TEST_CASE("http limits: a reader that stops reading a response over 8 MiB is dropped after idle_timeout_ms") {
  http_fixture d{big_response_config};
  client c{d.port, "127.0.0.1", 64 << 10};
  REQUIRE(c.send(tokenize_request(tokenize_bytes)));
  std::string raw;
  REQUIRE(c.read_some(raw, 20s) == ending::data); // the response has started
  // The stimulus: reading nothing for three idle timeouts.
  std::this_thread::sleep_for(3 * idle_timeout);
  CHECK(c.read_to_close(raw, 20s) == ending::closed);
  const auto end = raw.find("\r\n\r\n");
  REQUIRE(end != std::string::npos);
  const auto at = raw.find("Content-Length: ");
  REQUIRE(at < end);
  const auto want = end + 4 + std::stoul(raw.substr(at + 16));
  CHECK(raw.size() < want); // what the kernel held reached us; the rest was dropped
}
