#include "common/child_process.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace kvlane {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t max_line_piece = 64 * 1024;

std::string errno_text(std::string_view what, int e) {
  return std::string{what} + ": " + std::strerror(e);
}

std::string_view env_name(std::string_view entry) {
  return entry.substr(0, entry.find('='));
}

/// This process's environment adjusted by `opts`, built before fork().
std::vector<std::string> child_environment(const child_options& opts) {
  auto dropped = [&](std::string_view name) {
    auto same = [&](const std::string& x) { return x == name; };
    auto set_here = [&](const std::string& x) { return env_name(x) == name; };
    return std::any_of(opts.unset_env.begin(), opts.unset_env.end(), same)
           || std::any_of(opts.set_env.begin(), opts.set_env.end(), set_here);
  };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (!dropped(env_name(*e)))
      env.emplace_back(*e);
  env.insert(env.end(), opts.set_env.begin(), opts.set_env.end());
  return env;
}

std::chrono::milliseconds left_until(clock::time_point deadline) {
  return std::max(0ms, std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()));
}

void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

} // namespace

struct child_process::state {
  std::string path;
  pid_t pid = -1;
  int out_fd = -1;
  int pidfd = -1;
  int wake_fd = -1; ///< eventfd: tells the reader to stop
  std::optional<int> status;
  std::thread reader;

  std::size_t max_output = 0;
  std::function<void(std::string_view)> on_line;

  mutable std::mutex mutex;
  std::condition_variable cv;
  std::string output;       ///< guarded by mutex
  std::size_t dropped = 0;  ///< bytes dropped from the front of output, guarded by mutex
  std::size_t scanned = 0;  ///< absolute offset after the last wait_for_output match
  bool eof = false;         ///< guarded by mutex

  ~state() {
    if (pid > 0 && !status) {
      ::kill(pid, SIGKILL);
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
    }
    if (reader.joinable()) {
      const std::uint64_t one = 1;
      [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
      reader.join();
    }
    close_fd(out_fd);
    close_fd(pidfd);
    close_fd(wake_fd);
  }

  void append(const char* data, std::size_t n) {
    {
      std::lock_guard lock{mutex};
      output.append(data, n);
      if (output.size() > max_output) {
        const auto cut = output.size() - max_output;
        output.erase(0, cut);
        dropped += cut;
      }
    }
    cv.notify_all(); // wait_for_output looks again
  }

  void read_output() {
    std::string pending;
    char buf[4096];
    for (;;) {
      pollfd p[2] = {{out_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR)
          continue;
        break;
      }
      if (p[1].revents != 0)
        break;
      const auto n = ::read(out_fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      append(buf, static_cast<std::size_t>(n));
      if (on_line) {
        pending.append(buf, static_cast<std::size_t>(n));
        std::size_t start = 0;
        for (auto nl = pending.find('\n'); nl != std::string::npos;
             nl = pending.find('\n', start)) {
          on_line(std::string_view{pending}.substr(start, nl - start));
          start = nl + 1;
        }
        pending.erase(0, start);
        while (pending.size() >= max_line_piece) {
          on_line(std::string_view{pending}.substr(0, max_line_piece));
          pending.erase(0, max_line_piece);
        }
      }
    }
    if (on_line && !pending.empty())
      on_line(pending);
    std::lock_guard lock{mutex};
    eof = true;
    cv.notify_all();
  }
};

void child_process::close_output() {
  if (s_->reader.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(s_->wake_fd, &one, sizeof one);
    s_->reader.join(); // it marks the output closed (eof)
  }
  close_fd(s_->out_fd);
}

expected<child_process, std::string> child_process::start(const std::string& path,
                                                          child_options opts) {
  auto s = std::make_unique<state>();
  s->path = path;
  s->max_output = std::max<std::size_t>(opts.max_output_bytes, 1);
  s->on_line = std::move(opts.on_line);

  // Everything the child needs exists before fork().
  auto env = child_environment(opts);
  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (auto& a : opts.args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    return unexpected(errno_text("open /dev/null", errno));
  int out[2] = {-1, -1}, exec_error[2] = {-1, -1};
  auto close_all = [&] {
    close_fd(devnull);
    for (int* fd : {&out[0], &out[1], &exec_error[0], &exec_error[1]})
      close_fd(*fd);
  };
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(exec_error, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    return unexpected(errno_text("pipe2", e));
  }
  s->wake_fd = ::eventfd(0, EFD_CLOEXEC);
  if (s->wake_fd < 0) {
    const int e = errno;
    close_all();
    return unexpected(errno_text("eventfd", e));
  }

  // Buffered output would otherwise be written twice, once by the child.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return unexpected(errno_text("fork", e));
  }
  if (pid == 0) {
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (opts.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(127);
    }
    ::execve(path.c_str(), argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] auto n = ::write(exec_error[1], &e, sizeof e);
    ::_exit(127);
  }
  s->pid = pid;
  close_fd(devnull);
  close_fd(out[1]);
  close_fd(exec_error[1]);
  s->out_fd = std::exchange(out[0], -1);

  // Either execve() succeeded (the pipe closes with nothing in it) or the child sent its errno.
  int exec_errno = 0;
  ssize_t got = 0;
  do
    got = ::read(exec_error[0], &exec_errno, sizeof exec_errno);
  while (got < 0 && errno == EINTR);
  close_fd(exec_error[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    s->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return unexpected(errno_text("cannot execute '" + path + "'", exec_errno));
  }

  // The raw system call: glibc 2.36's <sys/pidfd.h> lacks extern "C".
  s->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (s->pidfd < 0)
    return unexpected(errno_text("pidfd_open", errno)); // ~state kills and reaps the child
  s->reader = std::thread{[p = s.get()] { p->read_output(); }};
  return child_process{std::move(s)};
}

child_process::child_process(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
child_process::child_process(child_process&&) noexcept = default;
child_process& child_process::operator=(child_process&&) noexcept = default;
child_process::~child_process() = default;

pid_t child_process::pid() const noexcept {
  return s_->pid;
}

bool child_process::reap(std::chrono::milliseconds timeout) {
  if (s_->status)
    return true;
  pollfd p{s_->pidfd, POLLIN, 0};
  const auto deadline = clock::now() + timeout;
  for (;;) {
    const int rc = ::poll(&p, 1, static_cast<int>(left_until(deadline).count()));
    if (rc == 1)
      break;
    if (rc == 0 || errno != EINTR)
      return false;
  }
  int st = 0;
  pid_t r = 0;
  do
    r = ::waitpid(s_->pid, &st, 0);
  while (r < 0 && errno == EINTR);
  if (r != s_->pid)
    return false;
  s_->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return true;
}

bool child_process::wait_for_output(std::string_view needle, std::chrono::milliseconds timeout) {
  std::unique_lock lock{s_->mutex};
  auto at = std::string::npos;
  auto found = [&] {
    const auto from = s_->scanned > s_->dropped ? s_->scanned - s_->dropped : 0;
    at = s_->output.find(needle, from);
    return at != std::string::npos;
  };
  s_->cv.wait_for(lock, timeout, [&] { return found() || s_->eof; });
  if (at == std::string::npos)
    return false;
  s_->scanned = s_->dropped + at + needle.size();
  return true;
}

void child_process::signal(int sig) {
  if (!s_->status)
    ::kill(s_->pid, sig);
}

std::optional<int> child_process::wait_exit(std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  if (!reap(timeout))
    return std::nullopt;
  std::unique_lock lock{s_->mutex};
  s_->cv.wait_until(lock, deadline, [&] { return s_->eof; });
  return s_->status;
}

std::optional<int> child_process::exit_status() {
  reap(0ms);
  return s_->status;
}

expected<int, std::string> child_process::stop(std::chrono::milliseconds grace,
                                               std::chrono::milliseconds bound) {
  if (s_->status)
    return *s_->status;
  ::kill(s_->pid, SIGTERM);
  if (!reap(grace)) {
    ::kill(s_->pid, SIGTERM);
    if (!reap(bound)) {
      ::kill(s_->pid, SIGKILL);
      reap(10s);
      return unexpected(std::string{s_->path} + " (pid " + std::to_string(s_->pid)
                        + ") did not exit within " + std::to_string((grace + bound).count())
                        + " ms of SIGTERM; killed it");
    }
  }
  return *s_->status;
}

std::string child_process::output() const {
  std::lock_guard lock{s_->mutex};
  return s_->output;
}

std::vector<std::string> child_process::last_lines(std::size_t n) const {
  std::lock_guard lock{s_->mutex};
  std::string_view text{s_->output};
  if (!text.empty() && text.back() == '\n')
    text.remove_suffix(1);
  std::vector<std::string> lines;
  while (!text.empty() && lines.size() < n) {
    const auto nl = text.rfind('\n');
    const auto start = nl == std::string_view::npos ? 0 : nl + 1;
    lines.emplace_back(text.substr(start));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(0, nl);
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

} // namespace kvlane
