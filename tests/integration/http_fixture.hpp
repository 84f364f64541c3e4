#pragma once

// The HTTP API tests' fixture: a real kvlaned on a free port (listen = "127.0.0.1:0", its URL
// read from the log), a plain blocking socket, replies parsed (de-chunked), SSE payloads.

#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

namespace kvlane::test::http {

using namespace std::chrono_literals;
using kvlane::child_process;
using kvlane::test::spawn;
using kvlane::test::temp_dir;
using json = nlohmann::json;

inline constexpr std::string_view api_key = "test-key-7f3a";

inline std::string http_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 512
snapshot_bytes = "512KiB"
time_scale = 1000
[[model]]
name = "slow"
[model.sim]
slots = 2
max_context = 4096
max_prefill_chunk = 128
snapshot_bytes = "4MiB"
time_scale = 1
[http]
listen = "127.0.0.1:0"
api_key = "{}"
cors_origins = ["http://localhost:3000"]
header_timeout_ms = 300
)",
                     run_dir, api_key);
}

/// A plain blocking socket to the daemon.
class socket_fd {
public:
  explicit socket_fd(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~socket_fd() { close(); }
  void close() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }
  void send(std::string_view data) {
    while (!data.empty()) {
      const auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      REQUIRE(n > 0);
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  /// Reads until the peer closes (or 20 s pass).
  std::string read_all() {
    std::string out;
    while (read_some(out, 20'000)) {
    }
    return out;
  }
  /// Appends what arrives within `timeout_ms`; false on close or timeout.
  bool read_some(std::string& out, int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1)
      return false;
    char buf[16384];
    const auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0)
      return false;
    out.append(buf, static_cast<std::size_t>(n));
    return true;
  }

private:
  int fd_ = -1;
};

struct reply {
  int status = 0;
  std::string head;
  std::string body; ///< de-chunked
};

inline std::string dechunk(std::string_view raw) {
  std::string out;
  for (;;) {
    const auto eol = raw.find("\r\n");
    REQUIRE(eol != std::string_view::npos);
    const auto size = std::stoul(std::string{raw.substr(0, eol)}, nullptr, 16);
    raw.remove_prefix(eol + 2);
    if (size == 0)
      return out;
    REQUIRE(raw.size() >= size + 2);
    out.append(raw.substr(0, size));
    CHECK(raw.substr(size, 2) == "\r\n");
    raw.remove_prefix(size + 2);
  }
}

inline reply parse_reply(const std::string& raw) {
  reply r;
  const auto end = raw.find("\r\n\r\n");
  REQUIRE(end != std::string::npos);
  r.head = raw.substr(0, end + 2);
  r.status = std::stoi(raw.substr(9, 3));
  const auto body = std::string_view{raw}.substr(end + 4);
  r.body = r.head.find("Transfer-Encoding: chunked") != std::string::npos ? dechunk(body)
                                                                           : std::string{body};
  return r;
}

struct http_fixture {
  temp_dir dir;
  std::string run_dir = dir.path() + "/run";
  std::unique_ptr<child_process> proc;
  std::uint16_t port = 0;

  /// `config_for` renders the config for a runtime dir (default: http_config).
  explicit http_fixture(std::string (*config_for)(const std::string&) = http_config) {
    const auto config = dir.write("kvlane.toml", config_for(run_dir));
    proc = std::make_unique<child_process>(spawn(KVLANED_PATH, {"--config", config}));
    REQUIRE(proc->wait_for_output("ready:", 20s));
    std::smatch m;
    const std::regex url{R"(on http://127\.0\.0\.1:(\d+))"};
    const auto out = proc->output();
    REQUIRE(std::regex_search(out, m, url));
    port = static_cast<std::uint16_t>(std::stoi(m[1]));
  }

  reply request(std::string_view method, std::string_view path, std::string_view body = {},
                std::string_view extra_headers = {}, bool with_key = true) {
    socket_fd s{port};
    s.send(fmt::format("{} {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{}{}"
                       "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                       method, path,
                       with_key ? fmt::format("Authorization: Bearer {}\r\n", api_key) : "",
                       extra_headers, body.size(), body));
    return parse_reply(s.read_all());
  }

  json post_json(std::string_view path, const json& body, int expect = 200) {
    auto r = request("POST", path, body.dump());
    CAPTURE(r.body);
    REQUIRE(r.status == expect);
    return json::parse(r.body);
  }

  /// Runs `kvlane <args> --socket <admin socket>`; returns its output.
  std::string cli(std::vector<std::string> args) {
    args.push_back("--socket");
    args.push_back(run_dir + "/kvlane-admin.sock");
    auto p = spawn(KVLANE_CLI_PATH, args);
    REQUIRE(p.wait_exit(30s) == 0);
    return p.output();
  }

  /// `kvlane ps --json`: the live sequences.
  json ps() { return json::parse(cli({"ps", "--json"})); }
  /// `kvlane status --json`.
  json status() { return json::parse(cli({"status", "--json"})); }
};

/// The `data:` payloads of an SSE body; checks the framing on the way.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::string_view rest = body;
  while (!rest.empty()) {
    const auto end = rest.find("\n\n");
    REQUIRE(end != std::string_view::npos);
    const auto event = rest.substr(0, end);
    REQUIRE(event.starts_with("data: "));
    CHECK(event.find('\n') == std::string_view::npos);
    out.emplace_back(event.substr(6));
    rest.remove_prefix(end + 2);
  }
  return out;
}

inline json chat_body(std::string content, int max_tokens) {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", std::move(content)}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}


} // namespace kvlane::test::http
