// The HTTP driver's client against a scripted server on loopback: keep-alive,
// a stale pooled connection, the deadline.
#include "tools/bench/http_client.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <functional>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace kvlane::tools::bench;
using namespace std::chrono_literals;

namespace {

/// A one-thread server on 127.0.0.1: each request (head plus Content-Length
/// body) is answered by `respond`, which returns the bytes to send and
/// whether to close the connection afterwards.
class scripted_server {
public:
  using responder = std::function<std::pair<std::string, bool>(int request)>;

  explicit scripted_server(responder respond) : respond_(std::move(respond)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread{[this] { serve(); }};
  }

  ~scripted_server() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }

  http_endpoint endpoint() const { return {"127.0.0.1", port_}; }
  int connections() const { return connections_.load(); }

private:
  void serve() {
    int request = 0;
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0)
        return;
      ++connections_;
      std::string in;
      char buf[4096];
      bool open = true;
      while (open && !stop_) {
        const auto end = in.find("\r\n\r\n");
        if (end == std::string::npos) {
          const auto n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0)
            break;
          in.append(buf, static_cast<std::size_t>(n));
          continue;
        }
        std::size_t body = 0;
        if (auto cl = in.find("Content-Length: "); cl != std::string::npos && cl < end)
          body = std::stoul(in.substr(cl + 16));
        while (in.size() < end + 4 + body) {
          const auto n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0)
            break;
          in.append(buf, static_cast<std::size_t>(n));
        }
        in.erase(0, end + 4 + body);
        auto [out, close] = respond_(request++);
        (void)::send(c, out.data(), out.size(), MSG_NOSIGNAL);
        open = !close;
      }
      ::close(c);
    }
  }

  responder respond_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
};

const std::string ok_stream = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n"
                              "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";

http_request post() {
  http_request r;
  r.method = "POST";
  r.path = "/v1/completions";
  r.body = R"({"model":"bench"})";
  return r;
}

} // namespace

TEST_CASE("bench_http: a keep-alive connection carries the next request") {
  scripted_server server{[](int) { return std::pair{ok_stream, false}; }};
  http_client sut{server.endpoint()};
  for (int i = 0; i < 3; ++i) {
    std::string body;
    int status = 0;
    auto r = sut.exchange(post(), http_client::clock::now() + 5s,
                          [&](const http_head& h) { status = h.status; },
                          [&](std::string_view b) { body.append(b); });
    REQUIRE_MESSAGE(r.has_value(), r.error());
    CHECK(status == 200);
    CHECK(body == "data: [DONE]\n\n");
  }
  CHECK(server.connections() == 1);
}

TEST_CASE("bench_http: a pooled connection the server closed is retried on a fresh one") {
  // Every response announces keep-alive, then the server closes the connection anyway.
  scripted_server server{[](int) { return std::pair{ok_stream, true}; }};
  http_client sut{server.endpoint()};
  for (int i = 0; i < 2; ++i) {
    auto r = sut.fetch(post(), http_client::clock::now() + 5s);
    REQUIRE_MESSAGE(r.has_value(), r.error());
    CHECK(r->head.status == 200);
    std::this_thread::sleep_for(50ms); // the close reaches the client before the next request
  }
  CHECK(server.connections() == 2);
}

TEST_CASE("bench_http: an error status comes back with its body") {
  const std::string body =
    R"({"error":{"code":500,"message":"boom","type":"server_error"}})";
  scripted_server server{[&](int) {
    return std::pair{"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                     "Content-Length: "
                       + std::to_string(body.size()) + "\r\n\r\n" + body,
                     false};
  }};
  http_client sut{server.endpoint()};
  auto r = sut.fetch(post(), http_client::clock::now() + 5s);
  REQUIRE(r.has_value());
  CHECK(r->head.status == 500);
  CHECK(r->body == body);
}

TEST_CASE("bench_http: the deadline bounds a server that never answers") {
  scripted_server server{[](int) {
    std::this_thread::sleep_for(600ms);
    return std::pair{std::string{}, true};
  }};
  http_client sut{server.endpoint()};
  const auto start = http_client::clock::now();
  auto r = sut.fetch(post(), start + 200ms);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().find("timed out") != std::string::npos);
  CHECK(http_client::clock::now() - start < 550ms);
}

TEST_CASE("bench_http: a refused connection is an error that names the address") {
  http_endpoint nowhere{"127.0.0.1", 0};
  {
    scripted_server probe{[](int) { return std::pair{ok_stream, true}; }};
    nowhere = probe.endpoint();
  } // closed: nothing listens there now
  http_client sut{nowhere};
  auto r = sut.fetch(post(), http_client::clock::now() + 2s);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().find("cannot connect to 127.0.0.1:") != std::string::npos);
}
