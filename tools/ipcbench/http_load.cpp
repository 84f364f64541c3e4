#include "http_load.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace kvlane::ipcbench {

namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count());
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const auto n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

} // namespace

int http_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

sse_request_result sse_completion(int fd, const std::string& model, const std::string& prompt,
                                  std::uint32_t max_tokens) {
  sse_request_result out;
  const auto body = fmt::format(R"({{"model":"{}","prompt":"{}","max_tokens":{},"temperature":0,"stream":true}})",
                                model, prompt, max_tokens);
  const auto request = fmt::format("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
                                   "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                                   body.size(), body);
  const auto start = now_ns();
  if (!send_all(fd, request))
    return out;
  // The body is chunked SSE; the text of an event is in "text":"..." (empty in the last one).
  std::string buf;
  std::size_t scanned = 0;
  char chunk[65536];
  for (;;) {
    const auto n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0)
      return out;
    buf.append(chunk, static_cast<std::size_t>(n));
    for (;;) {
      const auto at = buf.find("data: ", scanned);
      if (at == std::string::npos)
        break;
      const auto end = buf.find("\n\n", at);
      if (end == std::string::npos)
        break;
      const std::string_view event{buf.data() + at, end - at};
      scanned = end + 2;
      if (event == "data: [DONE]") {
        // The terminating chunk "0\r\n\r\n" follows; drop what was read.
        out.ok = true;
        while (buf.find("0\r\n\r\n", scanned) == std::string::npos) {
          const auto m = ::recv(fd, chunk, sizeof chunk, 0);
          if (m <= 0)
            return out;
          buf.append(chunk, static_cast<std::size_t>(m));
        }
        return out;
      }
      if (event.find("\"text\":\"\"") == std::string_view::npos) {
        if (out.text_events++ == 0)
          out.ttft_us = static_cast<double>(now_ns() - start) / 1000.0;
      }
    }
  }
}

http_streams_result run_http_streams(std::uint16_t port, const std::string& model,
                                     std::uint32_t streams, std::uint32_t max_tokens,
                                     double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> tokens{0}, requests{0}, short_requests{0}, failed{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < streams; ++i)
    threads.emplace_back([&, i] {
      const int fd = http_connect(port);
      if (fd < 0) {
        failed.fetch_add(1);
        return;
      }
      for (std::uint64_t k = 0; !stop.load(); ++k) {
        auto r = sse_completion(fd, model, fmt::format("stream {} request {} says", i, k), max_tokens);
        if (!r.ok) {
          failed.fetch_add(1);
          break;
        }
        requests.fetch_add(1);
        tokens.fetch_add(r.text_events);
        if (r.text_events < max_tokens)
          short_requests.fetch_add(1);
      }
      ::close(fd);
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  http_streams_result out;
  out.tokens = tokens.load();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& t : threads)
    t.join();
  out.requests = requests.load();
  out.short_requests = short_requests.load();
  out.failed = failed.load();
  return out;
}

} // namespace kvlane::ipcbench
