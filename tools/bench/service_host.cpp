#include "tools/bench/service_host.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace kvlane::tools::bench {

namespace {

constexpr std::size_t max_passed_fds = 8;

std::string errno_text(std::string_view what, int e) {
  return fmt::format("{}: {}", what, std::strerror(e));
}

int status_of(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// The value of `key` in a notify message ("KEY=value" lines), or "".
std::string field(const std::string& body, std::string_view key) {
  const auto needle = "\n" + std::string(key) + "=";
  const auto at = ("\n" + body).find(needle);
  if (at == std::string::npos)
    return {};
  const auto start = at + needle.size() - 1; // in body, without the leading '\n'
  return body.substr(start, body.find('\n', start) - start);
}

} // namespace

// -- notify_socket -----------------------------------------------------------------

expected<notify_socket, std::string> notify_socket::bind(std::string path) {
  sockaddr_un a{};
  if (path.empty() || path.size() >= sizeof a.sun_path)
    return unexpected(fmt::format("notify socket path '{}' is empty or longer than {} bytes", path,
                                  sizeof a.sun_path - 1));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return unexpected(errno_text("socket(AF_UNIX, SOCK_DGRAM)", errno));
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    return unexpected(errno_text(fmt::format("bind '{}'", path), e));
  }
  return notify_socket{std::move(path), fd};
}

notify_socket::notify_socket(notify_socket&& other) noexcept
  : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)),
    store_(std::exchange(other.store_, {})) {}

notify_socket& notify_socket::operator=(notify_socket&& other) noexcept {
  if (this != &other) {
    close_all();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    store_ = std::exchange(other.store_, {});
  }
  return *this;
}

notify_socket::~notify_socket() {
  close_all();
}

void notify_socket::close_all() noexcept {
  clear_store();
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  fd_ = -1;
}

void notify_socket::clear_store() noexcept {
  for (auto& [name, fd] : store_)
    ::close(fd);
  store_.clear();
}

expected<std::optional<notify_socket::clock::time_point>, std::string>
notify_socket::wait_for(std::string_view line, std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  const auto wanted = std::string(line) + "\n";
  for (;;) {
    const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0)
      return std::optional<clock::time_point>{};
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return unexpected(errno_text("poll on the notify socket", errno));
    if (rc == 0)
      return std::optional<clock::time_point>{};
    auto body = receive();
    if (!body)
      return unexpected(std::move(body).error());
    if (("\n" + *body).find("\n" + wanted) != std::string::npos)
      return std::optional<clock::time_point>{clock::now()};
  }
}

expected<void, std::string> notify_socket::drain() {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, 0);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return unexpected(errno_text("poll on the notify socket", errno));
    if (rc == 0)
      return {};
    if (auto body = receive(); !body)
      return unexpected(std::move(body).error());
  }
}

expected<void, std::string> notify_socket::serve_until(int stop_fd) {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int rc = ::poll(p, 2, -1);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return unexpected(errno_text("poll on the notify socket", errno));
    if (p[0].revents & POLLIN) {
      if (auto body = receive(); !body)
        return unexpected(std::move(body).error());
      continue; // the socket first: a stop leaves nothing unread that came before it
    }
    if (p[1].revents != 0)
      return {};
  }
}

expected<std::unique_ptr<serve_thread>, std::string> serve_thread::start(notify_socket& notify) {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0)
    return unexpected(errno_text("eventfd", errno));
  std::unique_ptr<serve_thread> t{new serve_thread(fd)};
  t->thread_ = std::thread{[p = t.get(), &notify] {
    if (auto ok = notify.serve_until(p->stop_fd_); !ok)
      p->error_ = std::move(ok).error();
  }};
  return t;
}

serve_thread::~serve_thread() {
  (void)stop();
  ::close(stop_fd_);
}

expected<void, std::string> serve_thread::stop() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (!error_.empty())
    return unexpected(error_);
  return {};
}

// One datagram, as systemd's manager reads it.
expected<std::string, std::string> notify_socket::receive() {
  char text[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_passed_fds)];
  iovec iov{text, sizeof text};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n = 0;
  do
    n = ::recvmsg(fd_, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return unexpected(errno_text("recvmsg on the notify socket", errno));
  std::vector<int> fds;
  for (auto* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const auto count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
  std::string body(text, static_cast<std::size_t>(n));
  if (body.empty() || body.back() != '\n')
    body += '\n';
  const auto name = field(body, "FDNAME");
  if (field(body, "FDSTORE") == "1") {
    if (fds.size() != 1) {
      for (int fd : fds)
        ::close(fd);
      return unexpected(fmt::format("FDSTORE=1 (FDNAME={}) carried {} descriptors, not 1", name,
                                    fds.size()));
    }
    if (auto it = store_.find(name); it != store_.end())
      ::close(it->second);
    store_[name] = fds[0];
    return body;
  }
  for (int fd : fds)
    ::close(fd);
  if (field(body, "FDSTOREREMOVE") == "1")
    if (auto it = store_.find(name); it != store_.end()) {
      ::close(it->second);
      store_.erase(it);
    }
  return body;
}

// -- service -------------------------------------------------------------------------

expected<service, std::string> service::start(const options& opts, notify_socket& notify) {
  std::vector<int> fds;
  std::string names;
  if (opts.pass_store)
    for (const auto& [name, fd] : notify.store()) {
      fds.push_back(fd);
      names += (names.empty() ? "" : ":") + name;
    }
  if (fds.size() > max_passed_fds)
    return unexpected(fmt::format("{} stored descriptors; at most {} can be passed", fds.size(),
                                  max_passed_fds));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (!v.starts_with("LISTEN_") && !v.starts_with("NOTIFY_SOCKET=")
        && !v.starts_with("WATCHDOG_"))
      env.emplace_back(v);
  }
  env.push_back("NOTIFY_SOCKET=" + notify.path());
  if (!fds.empty()) {
    env.push_back("LISTEN_FDS=" + std::to_string(fds.size()));
    env.push_back("LISTEN_FDNAMES=" + names);
  }
  // LISTEN_PID is the child's own pid, known only after fork: its digits are
  // written into this slot there (no allocation between fork and exec).
  env.push_back("LISTEN_PID=0000000000");
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  char* pid_digits = env.back().data() + std::strlen("LISTEN_PID=");
  std::string path = opts.kvlaned_path;
  std::string flag = "--config";
  std::string cfg = opts.config_path;
  char* argv[] = {path.data(), flag.data(), cfg.data(), nullptr};
  const int out = ::open(opts.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0)
    return unexpected(errno_text(fmt::format("cannot open '{}'", opts.log_path), errno));
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const auto started = clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(out);
    ::close(devnull);
    return unexpected(errno_text("fork", e));
  }
  if (pid == 0) {
    // Async-signal-safe calls only from here to exec. Every descriptor used
    // below first goes above the range the passed ones are moved into (the
    // log or a passed descriptor may well be 3 or 4 here), so that no dup2
    // overwrites one not yet used.
    const int high_out = ::fcntl(out, F_DUPFD_CLOEXEC, 100);
    const int high_null = devnull >= 0 ? ::fcntl(devnull, F_DUPFD_CLOEXEC, 100) : -1;
    int high[max_passed_fds];
    for (std::size_t i = 0; i < fds.size(); ++i)
      high[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 100);
    if (high_out < 0)
      ::_exit(120);
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (high[i] < 0 || ::dup2(high[i], 3 + static_cast<int>(i)) < 0) // clears FD_CLOEXEC
        ::_exit(120);
    if (high_null >= 0)
      ::dup2(high_null, STDIN_FILENO);
    ::dup2(high_out, STDOUT_FILENO);
    ::dup2(high_out, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(121);
    char digits[12];
    int n = 0;
    for (pid_t p = ::getpid(); p > 0; p /= 10)
      digits[n++] = static_cast<char>('0' + p % 10);
    for (int k = 0; k < 10; ++k)
      pid_digits[k] = k < n ? digits[n - 1 - k] : '\0';
    ::execve(argv[0], argv, envp.data());
    ::_exit(127);
  }
  ::close(out);
  if (devnull >= 0)
    ::close(devnull);
  // The raw system call: glibc 2.36's <sys/pidfd.h> lacks extern "C".
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return unexpected(errno_text("pidfd_open", e));
  }
  return service{pid, pidfd, started};
}

service::service(service&& other) noexcept
  : pid_(std::exchange(other.pid_, -1)), pidfd_(std::exchange(other.pidfd_, -1)),
    started_(other.started_) {}

service& service::operator=(service&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    started_ = other.started_;
  }
  return *this;
}

service::~service() {
  kill_and_reap();
}

void service::kill_and_reap() noexcept {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    pid_t r = 0;
    do
      r = ::waitpid(pid_, nullptr, 0);
    while (r < 0 && errno == EINTR);
  }
  pid_ = -1;
  if (pidfd_ >= 0)
    ::close(pidfd_);
  pidfd_ = -1;
}

std::optional<int> service::exit_status() {
  if (pid_ <= 0)
    return std::nullopt;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r != pid_)
    return std::nullopt;
  pid_ = -1;
  ::close(std::exchange(pidfd_, -1));
  return status_of(st);
}

expected<int, std::string> service::stop(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0)
    return unexpected(std::string{"the service is not running"});
  ::kill(pid_, sig);
  const auto deadline = clock::now() + timeout;
  pollfd p{pidfd_, POLLIN, 0};
  bool exited = false;
  for (;;) {
    const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
    const int rc = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left, 0)));
    if (rc == 1) {
      exited = true;
      break;
    }
    if (rc == 0 || errno != EINTR)
      break;
  }
  if (!exited) {
    const auto pid = pid_;
    kill_and_reap();
    return unexpected(fmt::format("kvlaned (pid {}) did not exit within {} ms of signal {}; "
                                  "killed",
                                  pid, timeout.count(), sig));
  }
  int st = 0;
  pid_t r = 0;
  do
    r = ::waitpid(pid_, &st, 0);
  while (r < 0 && errno == EINTR);
  if (r != pid_)
    return unexpected(errno_text("waitpid", errno));
  pid_ = -1;
  ::close(std::exchange(pidfd_, -1));
  return status_of(st);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace kvlane::tools::bench
