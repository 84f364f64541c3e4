#include "tools/bench/race_server.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

expected<std::string, std::string> read_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return unexpected(fmt::format("cannot read '{}'", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

expected<std::uint16_t, std::string> free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return unexpected(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    ::close(fd);
    return unexpected(fmt::format("cannot pick a free port: {}", std::strerror(e)));
  }
  ::close(fd);
  return static_cast<std::uint16_t>(ntohs(a.sin_port));
}

race_server::race_server(server_kind kind, std::optional<temp_dir> dir, child_process child,
                         http_endpoint ep)
  : kind_(kind), dir_(std::move(dir)), child_(std::move(child)), endpoint_(std::move(ep)) {}

std::string race_server::admin_socket() const {
  return kind_ == server_kind::kvlane && dir_ ? dir_->path() + "/run/kvlane-admin.sock" : std::string{};
}

race_server::~race_server() {
  if (!stopped_)
    (void)stop();
}

bool race_server::running() {
  return !stopped_ && !child_.exit_status();
}

expected<int, std::string> race_server::stop() {
  stopped_ = true;
  return child_.stop(10s, 10s);
}

std::string race_server::tail(std::size_t lines) const {
  std::string out;
  for (const auto& l : child_.last_lines(lines))
    out += "\n    " + l;
  return out.empty() ? std::string{" (it printed nothing)"} : "; its last lines:" + out;
}

expected<std::unique_ptr<race_server>, std::string> race_server::start(const race_server_options& o) {
  const auto name = to_string(o.kind);
  auto port = free_loopback_port();
  if (!port)
    return unexpected(std::move(port).error());
  child_options co;
  co.max_output_bytes = 1u << 20;
  co.unset_env = {"NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC"};
  std::optional<temp_dir> dir;
  std::string config_text;
  if (o.kind == server_kind::kvlane) {
    auto d = temp_dir::create("kvlane-race");
    if (!d)
      return unexpected(std::move(d).error());
    const auto runtime = d->path() + "/run";
    if (runtime.size() + 24 >= sizeof(sockaddr_un{}.sun_path))
      return unexpected(fmt::format("the temporary directory's path is too long for a socket ({}); "
                                    "set TMPDIR to a shorter one",
                                    runtime));
    if (o.kvlane_config.empty()) {
      config_text = kvlaned_race_toml(o.settings, runtime, *port, o.log_level);
    } else {
      auto text = read_text(o.kvlane_config);
      if (!text)
        return unexpected(std::move(text).error());
      auto adapted = adapt_kvlane_config(*text, o.kvlane_config, runtime, *port);
      if (!adapted)
        return unexpected(std::move(adapted).error());
      config_text = std::move(*adapted);
    }
    auto path = d->write("kvlane.toml", config_text);
    if (!path)
      return unexpected(std::move(path).error());
    co.args = {"--config", *path};
    // Warnings and errors of the daemon (journal format "<4>logger: message").
    co.on_line = [](std::string_view l) {
      if (l.size() > 3 && l[0] == '<' && l[1] >= '0' && l[1] <= '4' && l[2] == '>')
        std::fprintf(stderr, "kvlaned: %.*s\n", static_cast<int>(l.size() - 3), l.data() + 3);
    };
    dir = std::move(*d);
  } else {
    co.args = llama_server_args(o.settings, *port);
  }
  if (o.progress)
    o.progress(fmt::format("starting {} on 127.0.0.1:{}", name, *port));
  const auto started = clock::now();
  auto child = child_process::start(o.exe, std::move(co));
  if (!child)
    return unexpected(fmt::format("cannot start {} ('{}'): {}", name, o.exe, child.error()));
  std::unique_ptr<race_server> s{
    new race_server(o.kind, std::move(dir), std::move(*child), http_endpoint{"127.0.0.1", *port})};
  s->config_text_ = std::move(config_text);

  // Ready when /health answers 200 (503 while the model loads).
  http_client probe{s->endpoint_, 1};
  const auto deadline = started + o.ready_timeout;
  std::string last = "no answer yet";
  auto next_line = clock::now() + 30s;
  for (;;) {
    if (auto st = s->child_.exit_status()) {
      s->stopped_ = true;
      return unexpected(fmt::format("{} exited with status {} before it was ready{}", name, *st,
                                    s->tail()));
    }
    http_request health;
    health.path = "/health";
    auto r = probe.fetch(health, std::min(deadline, clock::now() + 5s), 4096);
    if (r && r->head.status == 200)
      break;
    last = r ? fmt::format("HTTP {}", r->head.status) : r.error();
    if (clock::now() >= deadline) {
      (void)s->stop();
      return unexpected(fmt::format("{} was not ready within {} s (last /health: {}){}", name,
                                    o.ready_timeout.count() / 1000, last, s->tail()));
    }
    if (o.progress && clock::now() >= next_line) {
      next_line += 30s;
      o.progress(fmt::format("{}: waiting for /health ({})", name, last));
    }
    std::this_thread::sleep_for(200ms);
  }
  s->ready_s_ = std::chrono::duration<double>(clock::now() - started).count();
  if (o.progress)
    o.progress(fmt::format("{} ready after {:.1f} s", name, s->ready_s_));
  return s;
}

} // namespace kvlane::tools::bench
